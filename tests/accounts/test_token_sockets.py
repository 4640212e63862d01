"""An expired or revoked API token opens no websocket either."""

from __future__ import annotations

import datetime as dt

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from controlplane.accounts.models import ApiToken
from controlplane.accounts.services import token_issue, token_revoke
from controlplane.asgi import application
from controlplane.telemetry.consumers import CLOSE_UNAUTHENTICATED
from tests.sockets import Socket

from ..telemetry.test_consumer import ORIGIN, make_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@database_sync_to_async
def expired_token(user) -> str:
    token, key = token_issue(user=user, name="old")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    return key


@database_sync_to_async
def revoked_token(user) -> str:
    token, key = token_issue(user=user, name="gone")
    token_revoke(token=token)
    return key


@pytest.mark.parametrize("make_key", [expired_token, revoked_token], ids=["expired", "revoked"])
async def test_a_dead_token_is_unauthenticated_on_the_socket(
    private_redis, alice, vision, make_key
):
    job = await make_job(vision, alice)
    key = await make_key(alice)
    ws = Socket(
        application,
        f"/ws/jobs/{job.pk}/",
        headers=[ORIGIN, (b"authorization", f"Token {key}".encode())],
    )
    await ws.connect()
    assert (await ws.receive_output(timeout=5))["code"] == CLOSE_UNAUTHENTICATED
