"""Whatever the body, submitting a job answers 201 or a 400 naming fields, and a 400 writes
nothing (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import event, given
from rest_framework.test import APIClient

from controlplane.jobs.models import Job, JobEvent

from ..fuzz import FUZZ, bodies_around, nested

VALID = {
    "tenant": "vision",
    "name": "fuzz",
    "workload": "tiny_gpt",
    "world_size": 2,
    "steps": 20,
    "sync": "full",
    "priority": "normal",
    "deadline": "2099-01-01T00:00:00Z",
    "bandwidth_floor_mbps": 0,
    "bandwidth_ceiling_mbps": 500,
    "hyperparameters": {"lr": 0.01, "batch_size": 8},
}


@pytest.fixture
def api(alice) -> APIClient:
    client = APIClient()
    client.force_authenticate(alice)
    return client


def rows() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


def post(api: APIClient, body: str):
    return api.post("/api/v1/jobs/", data=body, content_type="application/json")


def assert_names_fields(response) -> None:
    errors = response.json()
    assert isinstance(errors, dict) and isinstance(errors.pop("detail", None), str), errors
    assert errors, "a 400 names at least one field"
    assert all(isinstance(reasons, list) and reasons for reasons in errors.values()), errors


@FUZZ
@given(body=bodies_around(VALID, extra_keys=["warp", "code", "entrypoint", "env"]))
def test_no_job_body_gives_a_500_or_writes_on_a_400(api, body):
    before = rows()
    response = post(api, json.dumps(body))
    event(f"status {response.status_code}")
    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert_names_fields(response)
        assert rows() == before
    else:
        assert rows()[0] == before[0] + 1


@FUZZ
@given(body=bodies_around({"priority": "high"}, extra_keys=["tenant"]))
def test_no_priority_body_gives_a_500_or_writes_on_a_400(api, alice, vision, body):
    from controlplane.jobs.services import job_submit
    from controlplane.jobs.spec import JobSpec

    job = Job.objects.first() or job_submit(
        tenant=vision,
        spec=JobSpec(name="p", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    before = (rows(), Job.objects.get(pk=job.pk).priority)
    response = api.post(
        f"/api/v1/jobs/{job.pk}/priority/", data=json.dumps(body), content_type="application/json"
    )
    event(f"status {response.status_code}")
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert_names_fields(response)
        assert (rows(), Job.objects.get(pk=job.pk).priority) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (nested(50), "body"),
        (nested(100_000), "body"),
        ("[1, 2]", "body"),
        ('"job"', "body"),
        ("{not json", "body"),
        ('{"name": NaN}', "body"),
        (json.dumps({**VALID, "steps": 10**400}), "steps"),
        (json.dumps({**VALID, "steps": 2.0}), "steps"),
        (json.dumps({**VALID, "name": {"$gt": ""}}), "name"),
        (json.dumps({**VALID, "tenant": {"slug": "vision"}}), "tenant"),
        (json.dumps({**VALID, "tenant": "vis\x00ion"}), "tenant"),
        (json.dumps({**VALID, "deadline": "2099-02-30T00:00:00Z"}), "deadline"),
        (json.dumps({**VALID, "colour": "blue"}), "colour"),
    ],
)
def test_a_hostile_job_body_is_a_400_naming_the_field(api, body, field):
    response = post(api, body)
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert rows() == (0, 0)


def test_a_form_encoded_submit_is_refused_as_unsupported(api):
    response = api.post(
        "/api/v1/jobs/", data="name=x&steps=2", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415
    assert rows() == (0, 0)


def test_an_unknown_status_filter_is_a_400(api):
    response = api.get("/api/v1/jobs/", {"status": "runn\x00ing"})
    assert response.status_code == 400
    assert "status" in response.json()
