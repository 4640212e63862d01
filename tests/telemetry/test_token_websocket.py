"""Websockets accept an API token (the CLI has no session); Origin rules still apply."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from controlplane.accounts.services import token_issue
from controlplane.asgi import application
from controlplane.telemetry.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from controlplane.telemetry.metrics import WEBSOCKET_CLIENTS
from tests.sockets import Socket

from .test_consumer import ORIGIN, make_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@database_sync_to_async
def token_of(user) -> str:
    return token_issue(user=user, name="ws")[1]


def socket(path: str, *headers) -> Socket:
    return Socket(application, path, headers=list(headers))


def clients(kind: str) -> float:
    return WEBSOCKET_CLIENTS.labels(kind=kind)._value.get()


async def test_a_token_in_the_header_opens_the_jobs_socket(private_redis, alice, vision):
    job = await make_job(vision, alice)
    before = clients("job")
    ws = socket(
        f"/ws/jobs/{job.pk}/", ORIGIN, (b"authorization", f"Token {await token_of(alice)}".encode())
    )
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(timeout=5))["status"] == "queued"
    assert clients("job") == before + 1
    await ws.disconnect()
    assert clients("job") == before


async def test_a_token_in_the_query_string_works_too(private_redis, alice, vision):
    job = await make_job(vision, alice)
    ws = socket(f"/ws/jobs/{job.pk}/?token={await token_of(alice)}", ORIGIN)
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(timeout=5))["type"] == "status"
    await ws.disconnect()


async def test_a_wrong_token_is_unauthenticated(private_redis, alice, vision):
    job = await make_job(vision, alice)
    ws = socket(f"/ws/jobs/{job.pk}/", ORIGIN, (b"authorization", b"Token not-a-real-key"))
    await ws.connect()
    assert (await ws.receive_output(timeout=5))["code"] == CLOSE_UNAUTHENTICATED


async def test_another_tenants_token_gets_not_found(private_redis, alice, bob, vision):
    job = await make_job(vision, alice)
    ws = socket(
        f"/ws/jobs/{job.pk}/", ORIGIN, (b"authorization", f"Token {await token_of(bob)}".encode())
    )
    await ws.connect()
    assert (await ws.receive_output(timeout=5))["code"] == CLOSE_NOT_FOUND


async def test_a_token_does_not_bypass_the_origin_check(private_redis, alice, vision):
    job = await make_job(vision, alice)
    evil = (b"origin", b"http://evil.example")
    ws = socket(
        f"/ws/jobs/{job.pk}/", evil, (b"authorization", f"Token {await token_of(alice)}".encode())
    )
    connected, _ = await ws.connect()
    assert not connected
