"""/metrics: token-protected, and every figure read from stored state at scrape time."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from controlplane.jobs.models import Job, JobEvent, Queue
from controlplane.telemetry.ingest import CURSORS_KEY
from controlplane.telemetry.metrics import ingest_lag_s
from controlplane.telemetry.models import LinkState, MetricSample
from workers.runtime import protocol

TOKEN = "scrape-me"


@pytest.fixture
def scrape(client, settings):
    settings.SYNCLANE_METRICS_TOKEN = TOKEN

    def get() -> dict[tuple[str, tuple], float]:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.content.decode())
            for s in family.samples
        }

    return get


def job(tenant, **fields) -> Job:
    base = {"name": "j", "workload": "tiny_gpt", "world_size": 2, "steps": 10, "sync": "full"}
    return Job.objects.create(
        tenant=tenant, queue=Queue.objects.get(tenant=tenant), **{**base, **fields}
    )


def test_without_a_configured_token_metrics_do_not_exist(client, settings, db):
    settings.SYNCLANE_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404


def test_a_wrong_token_is_refused(client, settings, db):
    settings.SYNCLANE_METRICS_TOKEN = TOKEN
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert client.get("/metrics").status_code == 401


def test_jobs_queue_and_quota_use_are_reported_per_tenant(scrape, vision, speech, private_redis):
    job(vision, status="running", allocation_mbps=300.0)
    waiting = job(vision)
    Job.objects.filter(pk=waiting.pk).update(created_at=timezone.now() - dt.timedelta(minutes=2))
    m = scrape()
    v = ("tenant", "vision")
    assert m[("synclane_jobs", (("state", "running"), v))] == 1
    assert m[("synclane_queue_depth", (v,))] == 1
    assert m[("synclane_queue_depth", (("tenant", "speech"),))] == 0
    assert 110 < m[("synclane_queue_oldest_wait_seconds", (v,))] < 600
    assert (m[("synclane_tenant_slots_used", (v,))], m[("synclane_tenant_slots_quota", (v,))]) == (
        2,
        4,
    )
    assert m[("synclane_tenant_bandwidth_used_mbps", (v,))] == 300.0


def test_counters_count_transitions_and_the_histogram_counts_admissions(
    scrape, vision, private_redis
):
    now = timezone.now()
    j = job(vision, status="running", admitted_at=now)
    Job.objects.filter(pk=j.pk).update(created_at=now - dt.timedelta(seconds=10))
    for frm, to in [("queued", "admitted"), ("running", "preempted"), ("running", "restarting")]:
        JobEvent.objects.create(job=j, from_status=frm, to_status=to)
    JobEvent.objects.create(job=j, from_status="admitted", to_status="admitted", reason="a note")
    m = scrape()
    v = (("tenant", "vision"),)
    assert m[("synclane_admissions_total", v)] == 1
    assert m[("synclane_preemptions_total", v)] == 1
    assert m[("synclane_restarts_total", v)] == 1
    bucket = (("le", "15.0"), ("tenant", "vision"))
    assert m[("synclane_time_to_admission_seconds_bucket", bucket)] == 1
    assert (
        m[("synclane_time_to_admission_seconds_bucket", (("le", "5.0"), ("tenant", "vision")))] == 0
    )


def test_running_jobs_report_allocation_speed_and_link_health(scrape, vision, private_redis):
    j = job(vision, status="running", allocation_mbps=500.0)
    MetricSample.objects.create(
        job=j, step=5, reported_at=timezone.now(), data={"samples_per_s": 42.0}
    )
    LinkState.objects.create(job=j, src=0, dst=1, state="degraded", measured_at=timezone.now())
    m = scrape()
    labels = (("job", str(j.pk)), ("tenant", "vision"))
    assert m[("synclane_job_allocation_mbps", labels)] == 500.0
    assert m[("synclane_job_samples_per_second", labels)] == 42.0
    assert m[("synclane_job_links", (*labels[:1], ("state", "degraded"), labels[1]))] == 1


def test_celery_queue_lengths_come_from_the_broker(scrape, vision, private_redis):
    private_redis.rpush("runs", "a", "b")
    m = scrape()
    assert m[("synclane_celery_queue_length", (("queue", "runs"),))] == 2
    assert m[("synclane_celery_queue_length", (("queue", "control"),))] == 0


def test_ingest_lag_is_the_age_of_the_oldest_unread_message(r):
    stream = protocol.telemetry_stream(7)
    r.sadd(protocol.ACTIVE_STREAMS_KEY, "7")
    read = r.xadd(stream, {"m": "1"}, id="1000-0")
    r.xadd(stream, {"m": "2"}, id="3000-0")
    r.xadd(stream, {"m": "3"}, id="4000-0")
    assert ingest_lag_s(r, now_s=10.0) == pytest.approx(9.0)
    r.hset(CURSORS_KEY, "7", read)
    assert ingest_lag_s(r, now_s=10.0) == pytest.approx(7.0)
    r.hset(CURSORS_KEY, "7", "4000-0")
    assert ingest_lag_s(r, now_s=10.0) == 0.0
