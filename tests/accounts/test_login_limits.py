"""Logging in is rate-limited per address and per username (429), and repeated failures lock
a username out from that address, even with the right password."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlplane.accounts.models import ApiToken

from ..conftest import PASSWORD


def token_login(username: str, password: str, ip: str = "10.0.0.1"):
    return APIClient(REMOTE_ADDR=ip).post(
        "/api/v1/auth/token/", {"username": username, "password": password}, format="json"
    )


def page_login(username: str, password: str, ip: str = "10.0.0.1"):
    return Client(REMOTE_ADDR=ip).post(
        "/accounts/login/", {"username": username, "password": password}
    )


@pytest.fixture
def low_rates(settings):
    settings.SYNCLANE_LOGIN_RATE_PER_IP = "4/minute"
    settings.SYNCLANE_LOGIN_RATE_PER_USER = "3/minute"
    settings.AXES_FAILURE_LIMIT = 100  # these tests are about rates, not lockout


def test_the_token_endpoint_answers_429_past_the_per_username_rate(alice, low_rates):
    statuses = [token_login("alice", PASSWORD, ip=f"10.0.0.{i}").status_code for i in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_the_token_endpoint_answers_429_past_the_per_address_rate(alice, bob, low_rates):
    names = ["alice", "bob", "carol", "dave", "erin"]
    statuses = [token_login(name, "wrong").status_code for name in names]
    assert statuses == [400, 400, 400, 400, 429]


def test_a_429_says_when_to_retry(alice, low_rates):
    for _ in range(3):
        token_login("alice", PASSWORD)
    response = token_login("alice", PASSWORD)
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert "throttled" in response.json()["detail"]


def test_the_login_page_answers_429_past_the_rate(alice, low_rates):
    statuses = [page_login("alice", "wrong", ip=f"10.0.1.{i}").status_code for i in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = page_login("alice", PASSWORD, ip="10.0.1.9")
    assert response.status_code == 429 and "Too many login attempts" in response.content.decode()


def test_the_admin_login_answers_429_past_the_rate(alice, low_rates):
    def admin_login(i: int) -> int:
        client = Client(REMOTE_ADDR=f"10.0.2.{i}")
        return client.post("/admin/login/", {"username": "alice", "password": "wrong"}).status_code

    assert [admin_login(i) for i in range(4)] == [200, 200, 200, 429]


@pytest.fixture
def lockout_after_three(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.SYNCLANE_LOGIN_RATE_PER_IP = "1000/minute"
    settings.SYNCLANE_LOGIN_RATE_PER_USER = "1000/minute"


def test_repeated_failures_lock_the_token_endpoint_even_for_the_right_password(
    alice, lockout_after_three
):
    assert [token_login("alice", "wrong").status_code for _ in range(2)] == [400, 400]
    assert token_login("alice", "wrong").status_code == 429
    locked = token_login("alice", PASSWORD)
    assert locked.status_code == 429
    assert "locked" in locked.json()["detail"]
    assert ApiToken.objects.count() == 0


def test_a_lockout_holds_for_that_address_only(alice, lockout_after_three):
    for _ in range(3):
        token_login("alice", "wrong", ip="10.9.9.9")
    assert token_login("alice", PASSWORD, ip="10.9.9.9").status_code == 429
    assert token_login("alice", PASSWORD, ip="10.8.8.8").status_code == 200


def test_repeated_failures_lock_the_login_page(alice, lockout_after_three):
    for _ in range(3):
        page_login("alice", "wrong")
    response = page_login("alice", PASSWORD)
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()


def test_a_malformed_rate_in_the_environment_fails_at_start(monkeypatch):
    from controlplane.lib.env import EnvError, env_rate

    monkeypatch.setenv("SYNCLANE_LOGIN_RATE_PER_IP", "lots")
    with pytest.raises(EnvError, match="is not a rate"):
        env_rate("SYNCLANE_LOGIN_RATE_PER_IP", "30/minute")
    monkeypatch.setenv("SYNCLANE_LOGIN_RATE_PER_IP", "5/second")
    assert env_rate("SYNCLANE_LOGIN_RATE_PER_IP", "30/minute") == "5/second"
