"""Models <-> the pure scheduling core's types.

The core speaks seconds (float epoch), bit/s and string ids; the models speak
datetimes, Mbit/s and integer keys. Everything crosses over here and nowhere else.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from controlplane import scheduling as core
from controlplane.jobs.choices import ACTIVE, JobStatus, QueuePolicy
from controlplane.jobs.models import Job, Node, Queue
from controlplane.tenancy.models import Tenant

MBPS = 1_000_000.0

_POLICIES = {
    QueuePolicy.STRICT_FIFO: core.QueuePolicy.STRICT_FIFO,
    QueuePolicy.BEST_EFFORT_FIFO: core.QueuePolicy.BEST_EFFORT_FIFO,
}


def epoch(when: dt.datetime | None) -> float | None:
    return None if when is None else when.timestamp()


def _mbps_to_bps(value: int | None) -> float | None:
    return None if value is None else value * MBPS


def cluster_capacity(now: dt.datetime | None = None) -> core.Cluster:
    """Slots and fabric of the nodes seen within the node timeout.

    With no node registered at all (a fresh install before its worker started), the
    cluster is this one machine as configured in settings.
    """
    now = now or timezone.now()
    if not Node.objects.exists():
        return core.Cluster(
            slots=settings.SYNCLANE_CLUSTER_SLOTS,
            fabric_bps=settings.SYNCLANE_NODE_FABRIC_MBPS * MBPS,
        )
    cutoff = now - dt.timedelta(seconds=settings.SYNCLANE_NODE_TIMEOUT_S)
    live = Node.objects.filter(last_seen__gte=cutoff).aggregate(
        s=Sum("slots"), f=Sum("fabric_mbps")
    )
    return core.Cluster(slots=live["s"] or 0, fabric_bps=(live["f"] or 0) * MBPS)


def tenant_quota(tenant: Tenant, policy: str = QueuePolicy.STRICT_FIFO) -> core.TenantQuota:
    return core.TenantQuota(
        name=tenant.slug,
        nominal_slots=tenant.slot_quota,
        nominal_bandwidth_bps=tenant.bandwidth_quota_mbps * MBPS,
        max_running_jobs=tenant.max_running_jobs,
        weight=tenant.fair_share_weight,
        cohort=tenant.cohort or None,
        borrowing_limit_slots=tenant.slot_borrowing_limit,
        lending_limit_slots=tenant.slot_lending_limit,
        borrowing_limit_bps=_mbps_to_bps(tenant.bandwidth_borrowing_limit_mbps),
        lending_limit_bps=_mbps_to_bps(tenant.bandwidth_lending_limit_mbps),
        queue_policy=_POLICIES[QueuePolicy(policy)],
    )


def _request_fields(job: Job) -> dict[str, object]:
    remaining = max(job.steps - (job.last_step or 0), 0)
    return {
        "id": str(job.pk),
        "tenant": job.tenant.slug,
        "slots": job.world_size,
        "submit_time": job.created_at.timestamp(),
        "priority": job.priority,
        "bandwidth_floor_bps": job.bandwidth_floor_mbps * MBPS,
        "bandwidth_ceiling_bps": _mbps_to_bps(job.bandwidth_ceiling_mbps),
        "deadline": epoch(job.deadline),
        "remaining_steps": float(remaining),
        "steps_per_second": _rate(job),
    }


def _rate(job: Job) -> float | None:
    """Steps per second so far, from the last reported step; None before any report."""
    if not job.last_step or job.started_at is None:
        return None
    elapsed = (timezone.now() - job.started_at).total_seconds()
    return job.last_step / elapsed if elapsed > 0 else None


def job_request(job: Job) -> core.JobRequest:
    return core.JobRequest(**_request_fields(job))  # type: ignore[arg-type]


def running_job(job: Job) -> core.RunningJob:
    started = job.admitted_at or job.created_at
    return core.RunningJob(**_request_fields(job), started_at=started.timestamp())  # type: ignore[arg-type]


def snapshot(tenants: Iterable[Tenant] | None = None) -> core.Snapshot:
    """The scheduling core's view of the database now.

    Pending: queued jobs. Running: jobs holding slots, except those already asked to
    stop for a preemption (they are checkpointing and hold nothing new).
    """
    tenants = list(tenants if tenants is not None else Tenant.objects.all())
    policies = dict(Queue.objects.filter(name="default").values_list("tenant_id", "policy"))
    jobs = Job.objects.select_related("tenant")
    pending = jobs.filter(status=JobStatus.QUEUED).order_by("created_at", "pk")
    running = jobs.filter(status__in=ACTIVE, preempt_requested=False)
    return core.Snapshot(
        cluster=cluster_capacity(),
        tenants=[tenant_quota(t, policies.get(t.pk, QueuePolicy.STRICT_FIFO)) for t in tenants],
        pending=[job_request(j) for j in pending],
        running=[running_job(j) for j in running],
    )
