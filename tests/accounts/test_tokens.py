"""API tokens are named, listed, revocable, expire, and are stored only as a hash."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.accounts.models import ApiToken, hash_key

from ..conftest import PASSWORD


@pytest.fixture
def api() -> APIClient:
    return APIClient()


def log_in(api: APIClient, username: str = "alice", **extra) -> dict:
    response = api.post(
        "/api/v1/auth/token/", {"username": username, "password": PASSWORD, **extra}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_logging_in_issues_a_named_token_that_expires_after_the_default_ttl(api, alice, settings):
    settings.SYNCLANE_TOKEN_TTL_DAYS = 30
    body = log_in(api, name="laptop")
    assert body["name"] == "laptop" and body["token"].startswith(body["prefix"])
    expires = dt.datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert abs(expires - (timezone.now() + dt.timedelta(days=30))) < dt.timedelta(minutes=1)
    assert with_token(body["token"]).get("/api/v1/jobs/").status_code == 200


def test_a_form_encoded_login_as_the_readme_shows_works(api, alice):
    response = api.post(
        "/api/v1/auth/token/",
        f"username=alice&password={PASSWORD}",
        content_type="application/x-www-form-urlencoded",  # what curl -d sends
    )
    assert response.status_code == 200
    assert with_token(response.json()["token"]).get("/api/v1/jobs/").status_code == 200


def test_the_key_is_stored_only_as_its_hash(api, alice):
    key = log_in(api)["token"]
    token = ApiToken.objects.get()
    assert token.key_hash == hash_key(key) and key not in {token.key_hash, token.prefix}


def test_an_expired_token_is_refused(api, alice):
    key = log_in(api)["token"]
    ApiToken.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = with_token(key).get("/api/v1/jobs/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Token expired."


def test_a_token_lives_as_long_as_asked_within_the_maximum(api, alice):
    key = log_in(api)["token"]
    client = with_token(key)
    response = client.post(
        "/api/v1/auth/tokens/", {"name": "ci", "expires_in_days": 1}, format="json"
    )
    assert response.status_code == 201
    expires = ApiToken.objects.get(name="ci").expires_at
    assert abs(expires - (timezone.now() + dt.timedelta(days=1))) < dt.timedelta(minutes=1)
    too_long = client.post("/api/v1/auth/tokens/", {"expires_in_days": 366}, format="json")
    assert too_long.status_code == 400 and "expires_in_days" in too_long.json()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": {"a": 1}}, "name"),
        ({"name": 7}, "name"),
        ({"name": ""}, "name"),
        ({"expires_in_days": 2.0}, "expires_in_days"),
        ({"expires_in_days": True}, "expires_in_days"),
        ({"expires_in_days": 0}, "expires_in_days"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_new_token_is_a_400_naming_the_field_and_creates_nothing(api, alice, fields, field):
    api.force_authenticate(alice)
    response = api.post("/api/v1/auth/tokens/", fields, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert ApiToken.objects.count() == 0


def test_a_user_lists_their_own_tokens_without_keys(api, alice, bob):
    log_in(api, "alice", name="laptop")
    log_in(api, "bob", name="bobs")
    api.force_authenticate(alice)
    listed = api.get("/api/v1/auth/tokens/").json()
    assert [t["name"] for t in listed] == ["laptop"]
    assert "token" not in listed[0] and "key_hash" not in listed[0]


def test_a_revoked_token_is_refused(api, alice):
    body = log_in(api, name="laptop")
    client = with_token(body["token"])
    revoked = client.delete(f"/api/v1/auth/tokens/{body['id']}/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    response = client.get("/api/v1/jobs/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Token revoked."


def test_logging_out_a_token_revokes_it(api, alice):
    key = log_in(api)["token"]
    client = with_token(key)
    assert client.delete("/api/v1/auth/token/").status_code == 200
    assert client.get("/api/v1/jobs/").status_code == 401


def test_another_users_token_is_a_404_to_revoke(api, alice, bob):
    bobs = log_in(api, "bob")
    api.force_authenticate(alice)
    assert api.delete(f"/api/v1/auth/tokens/{bobs['id']}/").status_code == 404
    assert ApiToken.objects.get(pk=bobs["id"]).revoked_at is None


def test_a_browser_session_leaves_no_token_behind(alice):
    browser = Client()
    assert (
        browser.post("/accounts/login/", {"username": "alice", "password": PASSWORD}).status_code
        == 302
    )
    assert browser.get("/").status_code == 200
    assert browser.post("/accounts/logout/").status_code == 302
    assert ApiToken.objects.count() == 0
