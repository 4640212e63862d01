"""The OpenAPI schema: generated from the code, valid, complete, served without a CDN."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from openapi_spec_validator import validate

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict:
    """The schema as ``manage.py spectacular`` writes it, failing on any warning."""
    out = Path(tmp_path_factory.mktemp("schema")) / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    return yaml.safe_load(out.read_text())


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", op


def test_the_schema_is_valid_openapi_3(schema):
    assert schema["openapi"].startswith("3.")
    validate(schema)


def test_every_api_route_is_in_the_schema_under_v1(schema):
    assert len(schema["paths"]) >= 15
    assert all(path.startswith("/api/v1/") for path in schema["paths"])


def test_every_operation_has_a_success_schema_with_an_example(schema):
    """JSON answers have a schema and an example; a file has a schema; a 204 has no body."""
    for name, op in operations(schema):
        success = [code for code in op["responses"] if code.startswith("2")]
        assert success, f"{name} declares no success response"
        response = op["responses"][success[0]]
        if success[0] == "204":
            assert "content" not in response, name
            continue
        content = response.get("content", {})
        assert content and all("schema" in c for c in content.values()), f"{name}: no schema"
        if "application/json" in content:
            assert content["application/json"].get("examples"), f"{name} has no example"


def test_every_operation_declares_its_errors_in_the_one_error_shape(schema):
    for name, op in operations(schema):
        errors = {code: r for code, r in op["responses"].items() if code[0] in "45"}
        assert errors, f"{name} declares no error response"
        for code, response in errors.items():
            body = response["content"]["application/json"]
            assert body["schema"] == {"$ref": "#/components/schemas/Error"}, (name, code)
    assert schema["components"]["schemas"]["Error"]["required"] == ["detail"]


def test_operations_with_a_body_document_it_with_an_example(schema):
    for name, op in operations(schema):
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body and name != "POST /api/v1/auth/token/":
            assert "schema" in body, name
    submit = schema["paths"]["/api/v1/jobs/"]["post"]["requestBody"]["content"]
    assert submit["application/json"]["examples"]


def test_the_schema_is_served_at_api_schema(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert "/api/v1/jobs/" in response.json()["paths"]


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_swagger_ui_and_redoc_load_their_scripts_from_our_static_files(client, page):
    html = client.get(page).content.decode()
    assert "/static/drf_spectacular_sidecar/" in html
    assert "cdn." not in html and "unpkg" not in html
    for src in html.split('src="/static/')[1:]:
        assert finders.find(src.split('"')[0]), src.split('"')[0]
