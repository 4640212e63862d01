"""The ingest loop against a real Redis: what a run reports reaches the DB and the group."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.jobs.state import transition
from controlplane.telemetry.groups import job_group
from controlplane.telemetry.ingest import Ingest
from controlplane.telemetry.models import Alarm, MetricSample
from workers.runtime import protocol

pytestmark = pytest.mark.timeout(60)  # a hang fails fast, with a traceback of where it waited


@pytest.fixture
def job(vision, alice) -> Job:
    spec = JobSpec(name="t", workload="tiny_gpt", world_size=2, steps=100)
    return job_submit(tenant=vision, spec=spec, actor=alice)


def report(client, job_id: int, message_type: str, **data) -> None:
    client.xadd(protocol.telemetry_stream(job_id), {"type": message_type, "data": json.dumps(data)})
    client.sadd(protocol.ACTIVE_STREAMS_KEY, str(job_id))


async def receive_one(layer, channel: str) -> dict:
    """One channel-layer message, or a failure after 10 s (never a hung test)."""
    return await asyncio.wait_for(layer.receive(channel), timeout=10)


def listen(group: str):
    """Return the channel layer and a new channel subscribed to ``group``."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    return layer, channel


def metrics(step: int, ts: float, **extra) -> dict:
    return {
        "step": step,
        "loss": 4.0 - step / 100,
        "samples_per_s": 50.0,
        "ts": ts,
        "rank": 0,
        **extra,
    }


def test_it_stores_downsampled_samples_and_the_last_step(private_redis, job):
    for step in range(1, 11):
        report(private_redis, job.pk, "metrics", **metrics(step, ts=1000 + step * 0.1))
    report(private_redis, job.pk, "metrics", **metrics(11, ts=1001.15, val_loss=3.5))
    ingest = Ingest(client=private_redis, sample_interval_s=0.5)

    assert ingest.step(block_ms=10) == 11

    stored = list(MetricSample.objects.filter(job=job).values_list("step", flat=True))
    # One per 0.5 s of run time (steps 1 and 6), plus every evaluation step.
    assert stored == [1, 6, 11]
    assert Job.objects.get(pk=job.pk).last_step == 11


def test_it_resumes_after_what_it_already_read(private_redis, job):
    report(private_redis, job.pk, "metrics", **metrics(1, ts=1.0))
    Ingest(client=private_redis, sample_interval_s=0).step(block_ms=10)
    report(private_redis, job.pk, "metrics", **metrics(2, ts=2.0))

    # A new ingest process (fresh object) continues from the stored cursor.
    assert Ingest(client=private_redis, sample_interval_s=0).step(block_ms=10) == 1
    assert list(MetricSample.objects.filter(job=job).values_list("step", flat=True)) == [1, 2]


def test_it_opens_and_clears_alarms(private_redis, job):
    alarm = {"kind": "sync_drift", "rank": 1, "value": 0.4, "threshold": 0.2, "step": 9, "ts": 5.0}
    report(private_redis, job.pk, "alarm", state="raised", **alarm)
    ingest = Ingest(client=private_redis)
    ingest.step(block_ms=10)
    assert Alarm.objects.get(job=job).is_open

    report(private_redis, job.pk, "alarm", **{**alarm, "state": "cleared", "ts": 9.0})
    ingest.step(block_ms=10)
    stored = Alarm.objects.get(job=job)
    assert not stored.is_open
    assert (stored.value, stored.threshold, stored.step) == (0.4, 0.2, 9)


def test_it_forwards_every_message_to_the_jobs_group(private_redis, job):
    layer, channel = listen(job_group(job.pk))
    report(private_redis, job.pk, "metrics", **metrics(3, ts=1.0))

    Ingest(client=private_redis).step(block_ms=10)

    message = async_to_sync(receive_one)(layer, channel)
    assert message["payload"]["type"] == "metrics"
    assert message["payload"]["job"] == job.pk
    assert message["payload"]["data"]["step"] == 3


def test_it_retires_the_drained_stream_of_a_finished_job(private_redis, job):
    report(private_redis, job.pk, "metrics", **metrics(1, ts=1.0))
    ingest = Ingest(client=private_redis)
    ingest.step(block_ms=10)
    Job.objects.filter(pk=job.pk).update(status="succeeded")

    ingest.step(block_ms=10)

    assert not private_redis.sismember(protocol.ACTIVE_STREAMS_KEY, str(job.pk))
    assert not private_redis.exists(protocol.telemetry_stream(job.pk))


def test_malformed_entries_are_dropped_not_fatal(private_redis, job):
    private_redis.xadd(protocol.telemetry_stream(job.pk), {"type": "metrics", "data": "{not json"})
    private_redis.xadd(protocol.telemetry_stream(job.pk), {"type": "gossip", "data": "{}"})
    report(private_redis, job.pk, "metrics", **metrics(4, ts=1.0))
    Ingest(client=private_redis, sample_interval_s=0).step(block_ms=10)
    assert list(MetricSample.objects.filter(job=job).values_list("step", flat=True)) == [4]


def test_it_keeps_the_latest_state_of_each_link_and_forwards_cells_in_page_units(
    private_redis, job
):
    from controlplane.telemetry.models import LinkState

    layer, channel = listen(job_group(job.pk))
    link = {"src": 0, "dst": 1, "latency_s": 0.002, "jitter_s": 0.0001, "ts": 1.0, "rank": 0}
    report(private_redis, job.pk, "link", step=1, bandwidth_bps=9e8, state="ok", **link)
    report(private_redis, job.pk, "link", step=2, bandwidth_bps=1e8, state="degraded", **link)
    ingest = Ingest(client=private_redis)
    ingest.step(block_ms=10)
    ingest.flush()

    stored = LinkState.objects.get(job=job)
    assert (stored.step, stored.bandwidth_bps, stored.state) == (2, 1e8, "degraded")
    batch = async_to_sync(receive_one)(layer, channel)
    assert batch["type"] == "forward.many"  # one channel message per group and batch
    first = batch["payloads"][0]
    assert [p["data"]["step"] for p in batch["payloads"]] == [1, 2]
    assert first["type"] == "link"
    assert first["data"]["cells"] == [
        {
            "src": 0,
            "dst": 1,
            "bandwidth_mbps": 900.0,
            "latency_ms": 2.0,
            "jitter_ms": 0.1,
            "state": "ok",
            "reissued": False,  # an older runtime does not say: measured once
        }
    ]


def test_a_reissued_link_is_stored_and_forwarded_as_reissued_until_a_later_probe_is_not(
    private_redis, job
):
    from controlplane.telemetry.models import LinkState

    layer, channel = listen(job_group(job.pk))
    link = {"src": 0, "dst": 1, "bandwidth_bps": 9e8, "latency_s": 0.002, "ts": 1.0, "rank": 0}
    report(private_redis, job.pk, "link", step=1, reissued=True, **link)
    ingest = Ingest(client=private_redis)
    ingest.step(block_ms=10)
    ingest.flush()

    assert LinkState.objects.get(job=job).reissued
    payload = async_to_sync(receive_one)(layer, channel)["payload"]
    assert payload["data"]["cells"][0]["reissued"] is True

    report(private_redis, job.pk, "link", step=2, reissued=False, **link)
    ingest.step(block_ms=10)
    assert not LinkState.objects.get(job=job).reissued


async def receive_n(layer, channel: str, n: int) -> list[dict]:
    """Receive ``n`` payloads on one event loop (the layer's receive buffer is per loop)."""
    return [(await receive_one(layer, channel))["payload"] for _ in range(n)]


@pytest.mark.parametrize("wide", ["tenant", "cluster"])
def test_alarms_and_a_throttled_summary_reach_the_tenant_and_cluster_groups(
    private_redis, job, wide
):
    from controlplane.telemetry.groups import CLUSTER_GROUP, tenant_group

    layer, channel = listen(tenant_group(job.tenant_id) if wide == "tenant" else CLUSTER_GROUP)
    for step in range(1, 6):
        report(private_redis, job.pk, "metrics", **metrics(step, ts=step * 0.1))
    report(
        private_redis,
        job.pk,
        "alarm",
        kind="straggler",
        state="raised",
        value=2.0,
        threshold=1.0,
        step=5,
        ts=1.0,
    )
    ingest = Ingest(client=private_redis)
    ingest.step(block_ms=10)
    ingest.flush()

    got = async_to_sync(receive_n)(layer, channel, 2)
    alarm = next(p for p in got if p["type"] == "alarm")
    summary = next(p for p in got if p["type"] == "metrics")
    assert alarm["tenant"] == "vision" and alarm["data"]["alarm_id"] == Alarm.objects.get().pk
    assert summary["summary"] and summary["data"]["step"] == 5 and "rank" not in summary["data"]


def test_a_cleared_alarm_records_the_step_it_cleared_at(private_redis, job):
    alarm = {"kind": "sync_drift", "value": 0.4, "threshold": 0.2, "rank": 0}
    report(private_redis, job.pk, "alarm", state="raised", step=9, ts=5.0, **alarm)
    report(private_redis, job.pk, "alarm", state="cleared", step=14, ts=6.0, **alarm)
    Ingest(client=private_redis).step(block_ms=10)
    stored = Alarm.objects.get(job=job)
    assert (stored.step, stored.cleared_step) == (9, 14)


def test_a_running_jobs_stream_is_read_even_when_no_active_set_names_it(private_redis, job):
    # What a Redis restart leaves: the run's reporter writes again, the active set is empty.
    for to in (JobStatus.ADMITTED, JobStatus.RUNNING):
        job = transition(job, to, reason="test")
    private_redis.xadd(
        protocol.telemetry_stream(job.pk), {"type": "metrics", "data": json.dumps(metrics(7, 1.0))}
    )
    assert not private_redis.smembers(protocol.ACTIVE_STREAMS_KEY)

    assert Ingest(client=private_redis, sample_interval_s=0.0).step(block_ms=100) == 1

    assert MetricSample.objects.get(job=job).step == 7


def test_a_queued_job_without_a_registered_stream_is_not_read(private_redis, job):
    private_redis.xadd(
        protocol.telemetry_stream(job.pk), {"type": "metrics", "data": json.dumps(metrics(7, 1.0))}
    )
    assert Ingest(client=private_redis, sample_interval_s=0.0).step(block_ms=100) == 0
