"""Read helpers behind the pages: a job's history, a tenant's queues, the cluster's share.

Each returns plain data (lists, dicts) ready for ``charts`` and ``json_script``; callers
have already checked access (they pass objects from the access helpers).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from controlplane.dashboard.charts import JOB_METRICS, derive
from controlplane.jobs.choices import ACTIVE, JobStatus
from controlplane.jobs.models import Job, Node
from controlplane.telemetry.models import Alarm, AlarmKind, MetricSample
from controlplane.telemetry.series import (
    LinkCell,
    downsample_columns,
    enhancement_periods,
    link_matrix,
    stack_by_bucket,
)
from controlplane.tenancy.models import Tenant
from workers.runtime import protocol

MAX_POINTS = 1000  # per series, after min/max downsampling
MAX_ROWS = 20_000  # newest stored samples read for one history
CLUSTER_WINDOW = dt.timedelta(minutes=15)
CLUSTER_BUCKET_S = 5.0


def job_history(
    job: Job, *, after_step: int | None = None, max_points: int = MAX_POINTS
) -> dict[str, Any]:
    """Return what the job page draws: metric series, link matrix, alarms, drift figures.

    With ``after_step`` only samples after that step are read (a reconnecting page fills
    its gap); links and alarms are always whole, they are small.
    """
    samples = job.samples.all()
    if after_step is not None:
        samples = samples.filter(step__gt=after_step)
    raw = list(samples.order_by("-step", "-id").values_list("step", "data")[:MAX_ROWS])
    raw.reverse()
    rows = [{**derive(data), "step": step} for step, data in raw]
    alarms = list(job.alarms.select_related("acknowledged_by"))
    drift_alarms = [a for a in alarms if a.kind == AlarmKind.SYNC_DRIFT]
    return {
        "metrics": downsample_columns(rows, JOB_METRICS, max_points=max_points),
        "last_step": rows[-1]["step"] if rows else after_step,
        "links": link_matrix(_cells(job), job.world_size),
        "alarms": [alarm_json(a) for a in alarms],
        "drift_threshold": next((a.threshold for a in drift_alarms if a.threshold), None)
        or job.hyperparameters.get("drift_threshold")
        or protocol.DEFAULT_DRIFT_THRESHOLD,
        "periods": enhancement_periods(
            [(r["step"], bool(r.get("sync_enhanced"))) for r in rows if "sync_enhanced" in r],
            [(a.step, _cleared_step(a)) for a in drift_alarms],
        ),
    }


def alarm_json(alarm: Alarm) -> dict[str, Any]:
    """An alarm as pages list it (the same fields the live ``alarm`` message fills)."""
    return {
        "alarm_id": alarm.pk,
        "job": alarm.job_id,
        "kind": alarm.kind,
        "rank": alarm.rank,
        "step": alarm.step,
        "value": alarm.value,
        "threshold": alarm.threshold,
        "detail": alarm.detail,
        "raised_at": alarm.raised_at.isoformat(),
        "cleared_at": alarm.cleared_at.isoformat() if alarm.cleared_at else None,
        "acknowledged": alarm.acknowledged,
        "acknowledged_by": alarm.acknowledged_by.username if alarm.acknowledged_by else None,
    }


def eta_seconds(job: Job) -> float | None:
    """Seconds to the last step at the pace since the job started; None when unknown."""
    if job.status != JobStatus.RUNNING or not job.started_at or not job.last_step:
        return None
    elapsed = (timezone.now() - job.started_at).total_seconds()
    done = job.last_step - int((job.placement or {}).get("resumed_from") or 0)
    if done <= 0 or elapsed <= 0:
        return None
    return max(0.0, (job.steps - job.last_step) * elapsed / done)


def tenant_queue(tenant: Tenant) -> list[Job]:
    """The tenant's waiting jobs in admission order (priority, then submit time)."""
    return list(
        Job.objects.filter(tenant=tenant, status=JobStatus.QUEUED).order_by(
            "-priority", "created_at", "pk"
        )
    )


def tenant_running(tenant: Tenant) -> list[Job]:
    return list(
        Job.objects.filter(tenant=tenant, status__in=ACTIVE).order_by("-priority", "started_at")
    )


def cluster_share(tenants: QuerySet[Tenant], *, now: dt.datetime | None = None) -> dict[str, Any]:
    """Allocation by tenant and throughput per job over the last minutes, for ``tenants``.

    Throughput is keyed by job id (what live ``metrics`` summaries carry), with a ``name``.
    """
    now = now or timezone.now()
    rows = (
        MetricSample.objects.filter(job__tenant__in=tenants, reported_at__gte=now - CLUSTER_WINDOW)
        .order_by("reported_at")
        .values_list("job_id", "job__name", "job__tenant__slug", "reported_at", "data")
    )
    alloc: list[tuple[float, str, int, float]] = []
    throughput: dict[str, dict[str, Any]] = {}
    for job_id, name, slug, when, data in rows:
        ts = when.timestamp()
        if isinstance(data.get("allocation_bps"), int | float):
            alloc.append((ts, slug, job_id, data["allocation_bps"] / 1e6))
        if isinstance(data.get("samples_per_s"), int | float):
            series = throughput.setdefault(
                str(job_id), {"name": f"{job_id} {name}", "x": [], "y": []}
            )
            series["x"].append(when.isoformat())
            series["y"].append(data["samples_per_s"])
    allocation = {
        group: {
            "x": [dt.datetime.fromtimestamp(x, tz=dt.UTC).isoformat() for x in stack["x"]],
            "y": stack["y"],
        }
        for group, stack in stack_by_bucket(alloc, bucket_s=CLUSTER_BUCKET_S).items()
    }
    return {"allocation": allocation, "throughput": throughput}


def cluster_nodes(visible_jobs: QuerySet[Job]) -> list[dict[str, Any]]:
    """Nodes with their state, slots, and what the user's visible active jobs hold on each.

    Each: name, slots, used (slots those jobs hold there), jobs (their ids), state (ready,
    cordoned, draining, lost), state_reason, state_changed_at, link_state (the worst link
    state of those jobs: ok, degraded, down), address, labels, fabric_mbps, last_seen, alive.
    Until a worker registers its node, the one configured machine stands in as "local".
    """
    now = timezone.now()
    rows = list(Node.objects.order_by("name"))
    if not rows:
        rows = [_stand_in_node(now)]
    nodes = {row.name: _node_fields(row, now) for row in rows}
    for job in visible_jobs.filter(status__in=ACTIVE).prefetch_related("links"):
        worst = _worst_link(job)
        for part in job.rank_nodes or [{"node": rows[0].name, "ranks": range(job.world_size)}]:
            node = nodes.get(str(part["node"]))
            if node is None:
                continue
            ranks = part.get("ranks")
            node["used"] += len(ranks) if isinstance(ranks, list | range) else job.world_size
            node["jobs"].append(job.pk)
            if LINK_ORDER[worst] > LINK_ORDER[node["link_state"]]:
                node["link_state"] = worst
    return list(nodes.values())


LINK_ORDER = {"ok": 0, "degraded": 1, "down": 2}


def _worst_link(job: Job) -> str:
    states = [link.state for link in job.links.all() if link.state in LINK_ORDER]
    return max(states, key=LINK_ORDER.__getitem__, default="ok")


def _stand_in_node(now: dt.datetime) -> Node:
    return Node(
        name="local",
        slots=settings.SYNCLANE_CLUSTER_SLOTS,
        fabric_mbps=settings.SYNCLANE_NODE_FABRIC_MBPS,
        last_seen=now,
    )


def _node_fields(node: Node, now: dt.datetime) -> dict[str, Any]:
    return {
        "name": node.name,
        "slots": node.slots,
        "used": 0,
        "jobs": [],
        "state": node.status(now),
        "state_reason": node.state_reason,
        "state_changed_at": node.state_changed_at,
        "link_state": "ok",
        "address": node.address,
        "labels": dict(node.labels or {}),
        "fabric_mbps": node.fabric_mbps,
        "last_seen": node.last_seen if node.pk else None,
        "alive": not node.is_lost(now),
    }


def _cells(job: Job) -> list[LinkCell]:
    return [
        LinkCell(
            src=link.src,
            dst=link.dst,
            bandwidth_bps=link.bandwidth_bps,
            latency_s=link.latency_s,
            jitter_s=link.jitter_s,
            state=link.state,
            step=link.step,
            reissued=link.reissued,
        )
        for link in job.links.all()
    ]


def _cleared_step(alarm: Alarm) -> int | None:
    """The step a cleared alarm ended at (its raise step if the run did not say); None if open."""
    if alarm.is_open:
        return None
    return alarm.cleared_step if alarm.cleared_step is not None else alarm.step
