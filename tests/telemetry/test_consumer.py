"""ws/jobs/<id>/ with channels' communicator and the real Redis channel layer."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.test import Client

from controlplane.asgi import application
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.lib.publish import FORWARD
from controlplane.telemetry.groups import job_group
from tests.sockets import Socket

# A hang fails fast, with a traceback of where it waited.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@database_sync_to_async
def cookie_for(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@database_sync_to_async
def make_job(tenant, actor):
    # No slots: the job stays queued even when a live worker (integration tests) is running.
    tenant.slot_quota = 0
    tenant.save(update_fields=["slot_quota"])
    return job_submit(
        tenant=tenant,
        spec=JobSpec(name="w", workload="tiny_gpt", world_size=1, steps=5),
        actor=actor,
    )


def communicator(job_id: int, *headers) -> Socket:
    return Socket(application, f"/ws/jobs/{job_id}/", headers=list(headers))


async def test_a_member_receives_the_status_then_forwarded_metrics(private_redis, alice, vision):
    job = await make_job(vision, alice)
    ws = communicator(job.pk, ORIGIN, (b"cookie", await cookie_for(alice)))
    connected, _ = await ws.connect()
    assert connected
    first = await ws.receive_json_from(timeout=5)
    assert (first["type"], first["job"], first["status"]) == ("status", job.pk, "queued")

    payload = {"type": "metrics", "job": job.pk, "data": {"step": 1, "loss": 3.2}}
    await get_channel_layer().group_send(job_group(job.pk), {"type": FORWARD, "payload": payload})
    assert await ws.receive_json_from(timeout=5) == payload
    await ws.disconnect()


async def test_a_change_between_lookup_and_group_join_is_not_lost(
    private_redis, alice, vision, monkeypatch
):
    # The job is looked up before the socket joins its group; a transition published in
    # that gap reaches nobody, so the greeting must show the status as of after the join.
    from controlplane.jobs.state import transition
    from controlplane.telemetry.consumers import LiveConsumer

    job = await make_job(vision, alice)
    join = LiveConsumer._join

    async def cancel_then_join(self, groups):
        if groups:  # the join on connect, not the leave on disconnect
            await database_sync_to_async(transition)(job, "cancelled", reason="raced")
        await join(self, groups)

    monkeypatch.setattr(LiveConsumer, "_join", cancel_then_join)
    ws = communicator(job.pk, ORIGIN, (b"cookie", await cookie_for(alice)))
    connected, _ = await ws.connect()
    assert connected
    first = await ws.receive_json_from(timeout=5)
    assert (first["type"], first["status"]) == ("status", "cancelled")
    await ws.disconnect()


async def test_another_tenants_member_is_closed_with_not_found(private_redis, alice, bob, vision):
    job = await make_job(vision, alice)
    ws = communicator(job.pk, ORIGIN, (b"cookie", await cookie_for(bob)))
    await ws.connect()
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    # Answer the close, so the consumer stops before the loop does.
    await ws.disconnect()


async def test_an_anonymous_socket_is_closed_as_unauthenticated(private_redis, alice, vision):
    job = await make_job(vision, alice)
    ws = communicator(job.pk, ORIGIN)
    await ws.connect()
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    # Answer the close, so the consumer stops before the loop does.
    await ws.disconnect()


async def test_a_foreign_origin_is_refused_before_the_consumer(private_redis, alice, vision):
    job = await make_job(vision, alice)
    ws = communicator(
        job.pk, (b"origin", b"http://evil.example"), (b"cookie", await cookie_for(alice))
    )
    connected, _ = await ws.connect()
    assert not connected
