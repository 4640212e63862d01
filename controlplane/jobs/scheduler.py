"""Apply the pure scheduling core's decisions to the database, Redis and websockets.

    schedule_pass()   # one pass: snapshot -> core.schedule() -> apply

Run by the ``schedule_tick`` Celery task on every submit, job end, priority or quota
change, and every few seconds by beat.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane import scheduling as core
from controlplane.jobs import adapters, state
from controlplane.jobs.choices import ACTIVE, JobStatus
from controlplane.jobs.models import Job
from controlplane.lib.publish import publish
from controlplane.telemetry.groups import CLUSTER_GROUP, job_group, tenant_group
from controlplane.tenancy.models import Tenant
from workers.runtime import protocol

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    allocations: dict[int, float] = field(default_factory=dict)  # job id -> Mbit/s


def schedule_pass() -> PassResult:
    """Decide and apply one scheduling pass; return what changed.

    Steps: 1. lock the tenant rows (one pass at a time); 2. snapshot and decide;
    3. ask victims to stop; 4. admit (launch on commit); 5. write waiting reasons;
    6. write allocations, and push them to runs and browsers on commit.
    """
    result = PassResult()
    with transaction.atomic():
        tenants = list(Tenant.objects.select_for_update().order_by("pk"))
        decision = core.schedule(adapters.snapshot(tenants), timezone.now().timestamp())
        for preemption in decision.preemptions:
            if request_preemption(int(preemption.job_id), reason=preemption.reason):
                result.preempted.append(int(preemption.job_id))
        for admission in decision.admissions:
            _admit(admission)
            result.admitted.append(int(admission.job_id))
        _write_waiting(decision.waiting.values())
        result.allocations = _write_allocations(decision.allocations)
    return result


def request_preemption(job_id: int, *, reason: str) -> bool:
    """Ask the job's supervisor to checkpoint and requeue it; True if the job was asked.

    An admitted job that has not launched yet goes straight back to the queue.
    """
    job = Job.objects.filter(pk=job_id, status__in=ACTIVE).first()
    if job is None:
        return False
    if job.status == JobStatus.ADMITTED:
        try:
            state.transition(job, JobStatus.QUEUED, reason=f"back to the queue: {reason}")
            return True
        except state.TransitionError:
            job.refresh_from_db()
    touched = Job.objects.filter(pk=job_id, status__in=ACTIVE, preempt_requested=False).update(
        preempt_requested=True
    )
    if touched:
        state.note(job, f"preemption requested: {reason}")
    return bool(touched)


def _admit(admission: core.Admission) -> None:
    from workers.celery import app

    job = Job.objects.get(pk=int(admission.job_id))
    placement = {"waits_for": [int(v) for v in admission.preempts]} if admission.preempts else {}
    state.transition(
        job,
        JobStatus.ADMITTED,
        reason=admission.reason,
        placement=placement,
        wait_code="",
        preempt_requested=False,
        cancel_requested=False,
    )
    transaction.on_commit(lambda: app.send_task("workers.tasks.launch_job", args=(job.pk,)))


def _write_waiting(waiting: Iterable[core.Waiting]) -> None:
    for wait in waiting:
        Job.objects.filter(pk=int(wait.job_id), status=JobStatus.QUEUED).exclude(
            status_reason=wait.reason, wait_code=wait.code
        ).update(status_reason=wait.reason, wait_code=str(wait.code))


def _write_allocations(allocations: Mapping[str, core.Allocation]) -> dict[int, float]:
    """Store each holding job's allocation; push changes after commit. Returns Mbit/s by job."""
    # A run paced at 0 bit/s would never finish a collective: every holder gets at least
    # a trickle (a tenant with no bandwidth quota still makes slow progress).
    floor = settings.SYNCLANE_MIN_ALLOCATION_MBPS
    mbps = {int(job_id): max(a.bps / adapters.MBPS, floor) for job_id, a in allocations.items()}
    changed: list[tuple[int, str, float]] = []
    current = dict(Job.objects.filter(pk__in=mbps).values_list("pk", "allocation_mbps"))
    tenants = dict(Job.objects.filter(pk__in=mbps).values_list("pk", "tenant__slug"))
    for job_id, value in mbps.items():
        if current.get(job_id) is None or abs(current[job_id] - value) > 1e-6:
            Job.objects.filter(pk=job_id).update(allocation_mbps=value)
            changed.append((job_id, tenants[job_id], value))
    # Jobs that no longer hold slots hold no bandwidth either.
    released = list(
        Job.objects.exclude(pk__in=mbps)
        .filter(allocation_mbps__isnull=False)
        .values_list("pk", flat=True)
    )
    Job.objects.filter(pk__in=released).update(allocation_mbps=None)
    transaction.on_commit(lambda: push_allocations(changed, released))
    return mbps


def push_allocations(changed: list[tuple[int, str, float]], released: list[int]) -> None:
    """Tell runs (Redis key + nudge) and browsers (channels) about new allocations."""
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        with client.pipeline(transaction=False) as pipe:
            for job_id, _, value in changed:
                bps = str(int(value * adapters.MBPS))
                pipe.set(protocol.allocation_key(job_id), bps)
                pipe.publish(protocol.allocation_channel(job_id), bps)
            for job_id in released:
                pipe.delete(protocol.allocation_key(job_id))
            pipe.execute()
    except redis.RedisError:
        log.warning("could not push allocations to Redis", exc_info=True)
    tenant_ids = dict(Tenant.objects.values_list("slug", "pk"))
    for job_id, tenant, value in changed:
        message = {
            "type": "allocation",
            "job": job_id,
            "data": {"allocation_mbps": value, "tenant": tenant},
        }
        publish(job_group(job_id), message)
        publish(tenant_group(tenant_ids[tenant]), message)
        publish(CLUSTER_GROUP, message)
