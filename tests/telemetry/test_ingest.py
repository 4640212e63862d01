"""The ingest loop against a real Redis: what a run reports reaches the DB and the group."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.jobs.models import Job
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.telemetry.groups import job_group
from controlplane.telemetry.ingest import Ingest
from controlplane.telemetry.models import Alarm, MetricSample
from workers.runtime import protocol


@pytest.fixture
def job(vision, alice) -> Job:
    spec = JobSpec(name="t", workload="tiny_gpt", world_size=2, steps=100)
    return job_submit(tenant=vision, spec=spec, actor=alice)


def report(client, job_id: int, message_type: str, **data) -> None:
    client.xadd(protocol.telemetry_stream(job_id), {"type": message_type, "data": json.dumps(data)})
    client.sadd(protocol.ACTIVE_STREAMS_KEY, str(job_id))


def metrics(step: int, ts: float, **extra) -> dict:
    return {"step": step, "loss": 4.0 - step / 100, "samples_per_s": 50.0, "ts": ts, "rank": 0, **extra}


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
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(job_group(job.pk), channel)
    report(private_redis, job.pk, "metrics", **metrics(3, ts=1.0))

    Ingest(client=private_redis).step(block_ms=10)

    message = async_to_sync(layer.receive)(channel)
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
