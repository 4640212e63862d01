"""The ingest's fan-out: batches go out on its own loop, in order per group."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.telemetry.fanout import FORWARD_MANY, Fanout

pytestmark = pytest.mark.timeout(60)


async def receive(layer, channel: str, n: int) -> list[dict]:
    return [await asyncio.wait_for(layer.receive(channel), timeout=10) for _ in range(n)]


def test_batches_arrive_in_order_one_layer_message_per_group_and_batch(private_redis):
    layer = get_channel_layer()
    a, b = async_to_sync(layer.new_channel)(), async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("job.1", a)
    async_to_sync(layer.group_add)("job.2", b)
    fanout = Fanout()

    fanout.send([("job.1", {"n": 1}), ("job.2", {"n": 1}), ("job.1", {"n": 2})])
    fanout.send([("job.1", {"n": 3})])
    fanout.flush()

    first, second = async_to_sync(receive)(layer, a, 2)
    assert first["type"] == FORWARD_MANY and [p["n"] for p in first["payloads"]] == [1, 2]
    assert second["payload"] == {"n": 3}
    (only,) = async_to_sync(receive)(layer, b, 1)
    assert only["payload"] == {"n": 1}


def test_an_empty_batch_sends_nothing():
    assert Fanout().send([]) is None
