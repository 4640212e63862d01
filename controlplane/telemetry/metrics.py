"""Prometheus metrics at ``/metrics``, read from the database and Redis at scrape time.

    curl -H "Authorization: Bearer $SYNCLANE_METRICS_TOKEN" http://127.0.0.1:8000/metrics

Gauges and counters are computed from stored rows when Prometheus scrapes, so every
process reports the same figures and nothing is lost when a process restarts: the
counters (admissions, preemptions, restarts) count job events, which are never deleted
while their job exists. Only ``synclane_websocket_clients`` is this process's own.
The endpoint answers only ``Authorization: Bearer <SYNCLANE_METRICS_TOKEN>`` (401 without
it); with no token set it does not exist (404).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings
from django.db.models import Count, F, Min
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from controlplane.jobs.adapters import MBPS
from controlplane.jobs.choices import ACTIVE, WAITING, JobStatus
from controlplane.jobs.models import Job, JobEvent
from controlplane.telemetry.ingest import CURSORS_KEY
from controlplane.telemetry.models import LinkState, MetricSample
from controlplane.tenancy.models import Tenant
from controlplane.usage.services import tenant_usage
from workers.runtime import protocol

CELERY_QUEUES = ("control", "runs")
# Seconds from submit to admission: one second to an hour.
ADMISSION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

REGISTRY = CollectorRegistry()
WEBSOCKET_CLIENTS = Gauge(
    "synclane_websocket_clients",
    "Websocket clients connected to this ASGI process, by socket kind",
    ["kind"],
    registry=REGISTRY,
)


class SynclaneCollector(Collector):
    """Every metric read from stored state; one ``collect`` per scrape."""

    def collect(self) -> Iterator[Metric]:
        yield from job_metrics()
        yield from tenant_metrics()
        yield from running_job_metrics()
        yield from redis_metrics()


def job_metrics() -> Iterator[Metric]:
    """Jobs by state, admissions/preemptions/restarts, time to admission (per tenant)."""
    jobs = GaugeMetricFamily("synclane_jobs", "Jobs by state", labels=["tenant", "state"])
    for row in Job.objects.values("tenant__slug", "status").annotate(n=Count("pk")):
        jobs.add_metric([row["tenant__slug"], row["status"]], row["n"])
    yield jobs
    for name, status, doc in (
        ("synclane_admissions", JobStatus.ADMITTED, "Admissions"),
        ("synclane_preemptions", JobStatus.PREEMPTED, "Preemptions"),
        ("synclane_restarts", JobStatus.RESTARTING, "Restarts from a checkpoint"),
    ):
        counter = CounterMetricFamily(name, doc, labels=["tenant"])
        events = JobEvent.objects.filter(to_status=status).exclude(from_status=status)
        for per_tenant in events.values("job__tenant__slug").annotate(n=Count("pk")):
            counter.add_metric([per_tenant["job__tenant__slug"]], per_tenant["n"])
        yield counter
    yield admission_histogram()


def admission_histogram() -> HistogramMetricFamily:
    """Seconds from submit to (latest) admission, of every job that was admitted."""
    family = HistogramMetricFamily(
        "synclane_time_to_admission_seconds", "Submit to admission", labels=["tenant"]
    )
    waits: dict[str, list[float]] = {}
    admitted = Job.objects.filter(admitted_at__isnull=False).annotate(
        wait=F("admitted_at") - F("created_at")
    )
    for slug, wait in admitted.values_list("tenant__slug", "wait"):
        waits.setdefault(slug, []).append(max(0.0, wait.total_seconds()))
    for slug, values in sorted(waits.items()):
        buckets = [(str(b), sum(1 for v in values if v <= b)) for b in ADMISSION_BUCKETS]
        buckets.append(("+Inf", len(values)))
        family.add_metric([slug], buckets, sum_value=sum(values))
    return family


def tenant_metrics() -> Iterator[Metric]:
    """Queue depth and oldest wait, slots and bandwidth used against quota (per tenant)."""
    now = timezone.now()
    depth = GaugeMetricFamily("synclane_queue_depth", "Jobs waiting", labels=["tenant"])
    oldest = GaugeMetricFamily(
        "synclane_queue_oldest_wait_seconds", "Age of the oldest waiting job", labels=["tenant"]
    )
    waiting = {
        row["tenant__slug"]: row
        for row in Job.objects.filter(status__in=WAITING)
        .values("tenant__slug")
        .annotate(n=Count("pk"), first=Min("created_at"))
    }
    gauges = {
        name: GaugeMetricFamily(f"synclane_tenant_{name}", doc, labels=["tenant"])
        for name, doc in (
            ("slots_used", "Slots held by active jobs"),
            ("slots_quota", "Nominal slot quota"),
            ("bandwidth_used_mbps", "Bandwidth allocated to active jobs (Mbit/s)"),
            ("bandwidth_quota_mbps", "Nominal bandwidth quota (Mbit/s)"),
        )
    }
    for tenant in Tenant.objects.all():
        row = waiting.get(tenant.slug)
        depth.add_metric([tenant.slug], row["n"] if row else 0)
        oldest.add_metric([tenant.slug], (now - row["first"]).total_seconds() if row else 0.0)
        usage = tenant_usage(tenant)
        gauges["slots_used"].add_metric([tenant.slug], usage.slots_used)
        gauges["slots_quota"].add_metric([tenant.slug], usage.slots_nominal)
        gauges["bandwidth_used_mbps"].add_metric([tenant.slug], usage.bandwidth_bps / MBPS)
        gauges["bandwidth_quota_mbps"].add_metric([tenant.slug], usage.bandwidth_nominal_bps / MBPS)
    yield depth
    yield oldest
    yield from gauges.values()


def running_job_metrics() -> Iterator[Metric]:
    """Allocation, samples/s (latest stored sample) and link states of every active job."""
    labels = ["job", "tenant"]
    alloc = GaugeMetricFamily("synclane_job_allocation_mbps", "Allocated bandwidth", labels=labels)
    speed = GaugeMetricFamily("synclane_job_samples_per_second", "Latest samples/s", labels=labels)
    links = GaugeMetricFamily(
        "synclane_job_links", "Rank-to-rank links by health state", labels=[*labels, "state"]
    )
    active = {j.pk: j for j in Job.objects.filter(status__in=ACTIVE).select_related("tenant")}
    for job in active.values():
        alloc.add_metric([str(job.pk), job.tenant.slug], job.allocation_mbps or 0.0)
        latest = MetricSample.objects.filter(job=job).order_by("-step", "-id").first()
        value = (latest.data or {}).get("samples_per_s") if latest else None
        if isinstance(value, int | float):
            speed.add_metric([str(job.pk), job.tenant.slug], float(value))
    link_rows = LinkState.objects.filter(job_id__in=active).values("job_id", "state")
    for row in link_rows.annotate(n=Count("pk")):
        job = active[row["job_id"]]
        links.add_metric([str(job.pk), job.tenant.slug, row["state"]], row["n"])
    yield alloc
    yield speed
    yield links


def redis_metrics() -> Iterator[Metric]:
    """Celery queue lengths and the ingest lag; absent when Redis does not answer."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, decode_responses=True)
    try:
        queues = GaugeMetricFamily(
            "synclane_celery_queue_length", "Tasks waiting in a Celery queue", labels=["queue"]
        )
        for name in CELERY_QUEUES:
            queues.add_metric([name], client.llen(name))
        lag = GaugeMetricFamily(
            "synclane_ingest_lag_seconds", "Age of the oldest telemetry message not yet ingested"
        )
        lag.add_metric([], ingest_lag_s(client))
    except redis.RedisError:
        return
    finally:
        client.close()
    yield queues
    yield lag


def ingest_lag_s(client: redis.Redis, *, now_s: float | None = None) -> float:
    """Seconds since the oldest message still unread by the ingest was written (0: none).

    A stream entry's id starts with the Redis server's clock in milliseconds, so the age of
    the first entry after the ingest's cursor is how far the ingest is behind.
    """
    now_s = time.time() if now_s is None else now_s
    cursors: dict[Any, Any] = dict(client.hgetall(CURSORS_KEY))
    oldest: float | None = None
    for member in client.smembers(protocol.ACTIVE_STREAMS_KEY):
        job_id = member.decode() if isinstance(member, bytes) else str(member)
        cursor = cursors.get(job_id, "0-0")
        entries = client.xrange(protocol.telemetry_stream(job_id), min=f"({cursor}", count=1)
        if entries:
            written_s = int(str(entries[0][0]).split("-")[0]) / 1000
            oldest = written_s if oldest is None else min(oldest, written_s)
    return 0.0 if oldest is None else max(0.0, now_s - oldest)


REGISTRY.register(SynclaneCollector())


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the exposition text, for ``Authorization: Bearer <token>`` only."""
    token = settings.SYNCLANE_METRICS_TOKEN
    if not token:
        raise Http404("No such page")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        return HttpResponse("a valid bearer token is required\n", status=401)
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
