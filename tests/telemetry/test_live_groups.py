"""Tenant, cluster and alarm sockets, access re-checks, and fan-out isolation (real Redis layer)."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from controlplane.asgi import application
from controlplane.lib.publish import FORWARD
from controlplane.telemetry.groups import CLUSTER_GROUP, tenant_group
from controlplane.tenancy.models import Membership
from tests.sockets import Socket

from .test_consumer import ORIGIN, cookie_for, make_job

# A hang fails fast, with a traceback of where it waited.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def open_socket(path: str, user) -> Socket:
    ws = Socket(application, path, headers=[ORIGIN, (b"cookie", await cookie_for(user))])
    connected, _ = await ws.connect()
    assert connected
    return ws


async def send(group: str, payload: dict) -> None:
    await get_channel_layer().group_send(group, {"type": FORWARD, "payload": payload})


async def test_a_tenant_socket_gets_its_tenants_messages_and_bob_is_refused(
    private_redis, alice, bob, vision
):
    ws = await open_socket("/ws/tenants/vision/", alice)
    message = {
        "type": "alarm",
        "job": 1,
        "tenant": "vision",
        "data": {"kind": "sync_drift", "state": "raised"},
    }
    await send(tenant_group(vision.pk), message)
    assert await ws.receive_json_from(timeout=5) == message
    await ws.disconnect()

    refused = await open_socket("/ws/tenants/vision/", bob)
    assert await refused.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    # Answer the close, so the consumer stops before the loop does.
    await refused.disconnect()


async def test_bob_on_the_cluster_socket_never_receives_vision_messages(
    private_redis, alice, bob, vision, speech
):
    bobs = await open_socket("/ws/cluster/", bob)
    for kind, tenant in (("metrics", "vision"), ("allocation", None), ("metrics", "speech")):
        payload = {"type": kind, "job": 1, "data": {"tenant": "vision"} if tenant is None else {}}
        if tenant:
            payload["tenant"] = tenant
        await send(CLUSTER_GROUP, payload)
    received = await bobs.receive_json_from(timeout=5)
    assert received["tenant"] == "speech"
    assert await bobs.receive_nothing(timeout=0.3)
    await bobs.disconnect()


async def test_the_alarms_socket_joins_every_tenant_of_the_user_and_forwards_only_alarms(
    private_redis, alice, vision, speech
):
    await database_sync_to_async(Membership.objects.create)(
        user=alice, tenant=speech, role="viewer"
    )
    ws = await open_socket("/ws/alarms/", alice)
    await send(tenant_group(vision.pk), {"type": "status", "job": 1, "status": "running"})
    await send(tenant_group(speech.pk), {"type": "alarm", "job": 2, "data": {"kind": "straggler"}})
    assert (await ws.receive_json_from(timeout=5))["job"] == 2
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()


async def test_a_socket_is_closed_when_its_user_loses_the_membership(
    private_redis, alice, charlie, vision
):
    job = await make_job(vision, alice)
    ws = await open_socket(f"/ws/jobs/{job.pk}/", charlie)
    assert (await ws.receive_json_from(timeout=5))["type"] == "status"

    await database_sync_to_async(Membership.objects.filter(user=charlie).delete)()

    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    # Answer the close, so the consumer stops before the loop does.
    await ws.disconnect()


async def test_a_membership_change_that_keeps_access_keeps_the_socket(
    private_redis, alice, charlie, vision
):
    ws = await open_socket("/ws/tenants/vision/", charlie)
    # promote() returns once the access notice is on the socket's channel, and a channel
    # delivers in order: the consumer re-checks access before it sees the status below.
    await database_sync_to_async(promote)(charlie)
    await send(tenant_group(vision.pk), {"type": "status", "job": 1})
    assert (await ws.receive_json_from(timeout=5))["type"] == "status"
    await ws.disconnect()


def promote(user) -> None:
    membership = Membership.objects.get(user=user)
    membership.role = "member"
    membership.save()


async def test_a_stalled_reader_does_not_hold_back_another_one(private_redis, alice, vision):
    """A member that never reads fills its own channel; sends stay fast and others get everything."""
    layer = get_channel_layer()
    stalled, reader = await layer.new_channel(), await layer.new_channel()
    group = tenant_group(vision.pk)
    await layer.group_add(group, stalled)
    await layer.group_add(group, reader)
    n = layer.capacity + 50
    loop = asyncio.get_running_loop()
    started = loop.time()
    received = []
    for i in range(n):
        await layer.group_send(group, {"type": FORWARD, "payload": {"i": i}})
        received.append((await asyncio.wait_for(layer.receive(reader), timeout=10))["payload"]["i"])
    assert received == list(range(n))
    assert loop.time() - started < 30


async def test_a_batch_from_the_fan_out_reaches_the_socket_as_separate_messages_in_order(
    private_redis, alice, vision
):
    job = await make_job(vision, alice)
    ws = await open_socket(f"/ws/jobs/{job.pk}/", alice)
    await ws.receive_json_from(timeout=5)  # status
    payloads = [{"type": "metrics", "job": job.pk, "data": {"step": s}} for s in (1, 2, 3)]
    await get_channel_layer().group_send(
        f"job.{job.pk}", {"type": "forward.many", "payloads": payloads}
    )
    assert [await ws.receive_json_from(timeout=5) for _ in payloads] == payloads
    await ws.disconnect()
