"""Writes about jobs: submit, cancel, admit, and the supervisor's reports.

Each service is keyword-only, runs in one transaction, and schedules its side
effects (Celery enqueues, websocket messages) on commit.
"""

from __future__ import annotations

import logging

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.jobs import state
from controlplane.jobs.choices import ACTIVE, TERMINAL, WAITING, JobStatus, PriorityClass
from controlplane.jobs.models import Job, Queue
from controlplane.jobs.spec import JobSpec, SpecError
from controlplane.tenancy.models import Tenant

log = logging.getLogger(__name__)


def _enqueue_on_commit(task_name: str, *args: object) -> None:
    # Imported here: the Celery app imports Django settings, not the other way round.
    from workers.celery import app

    transaction.on_commit(lambda: app.send_task(task_name, args=args))


def request_schedule() -> None:
    """Ask the scheduler for a pass once the current transaction commits."""
    _enqueue_on_commit("workers.tasks.schedule_tick")


def check_fits(*, tenant: Tenant, spec: JobSpec) -> None:
    """Raise SpecError if the job is larger than the cluster itself.

    Such a job could never run, whatever the quotas, and would block a StrictFIFO queue.
    A job over its tenant's quota is accepted: it waits, with that reason, for the quota.
    """
    from controlplane.jobs.adapters import MBPS, cluster_capacity

    errors: dict[str, list[str]] = {}
    capacity = cluster_capacity()
    if capacity.slots and spec.world_size > capacity.slots:  # 0: no live worker now; wait
        errors["world_size"] = [f"needs {spec.world_size} slots; the cluster has {capacity.slots}"]
    fabric_mbps = capacity.fabric_bps / MBPS
    if fabric_mbps and spec.bandwidth_floor_mbps > fabric_mbps:
        errors["bandwidth_floor_mbps"] = [f"exceeds the cluster fabric of {fabric_mbps:g} Mbit/s"]
    if errors:
        raise SpecError(errors)


def job_submit(*, tenant: Tenant, spec: JobSpec, actor: AbstractBaseUser | None) -> Job:
    """Create a queued job for ``tenant`` from a validated spec and request scheduling.

    Raises SpecError (nothing written) if the job could never be admitted.
    """
    check_fits(tenant=tenant, spec=spec)
    with transaction.atomic():
        queue, _ = Queue.objects.get_or_create(tenant=tenant, name="default")
        job = Job.objects.create(
            tenant=tenant,
            queue=queue,
            submitted_by=actor if actor and actor.is_authenticated else None,
            name=spec.name,
            workload=spec.workload,
            world_size=spec.world_size,
            steps=spec.steps,
            sync=spec.sync,
            priority=spec.priority,
            deadline=spec.deadline,
            bandwidth_floor_mbps=spec.bandwidth_floor_mbps,
            bandwidth_ceiling_mbps=spec.bandwidth_ceiling_mbps,
            hyperparameters=spec.hyperparameters,
            status=JobStatus.QUEUED,
            status_reason="waiting for the scheduler",
        )
        state.note(job, "submitted", actor=actor)
        request_schedule()
    return job


def job_set_priority(*, job: Job, priority: int, actor: AbstractBaseUser | None) -> Job:
    """Change a job's priority class and request a scheduling pass (allocations follow).

    Raises ValueError for a value that is not a priority class. Returns the job refreshed.
    """
    if priority not in PriorityClass.values:
        raise ValueError(f"{priority!r} is not a priority class")
    with transaction.atomic():
        job.refresh_from_db()
        if job.is_terminal or job.priority == priority:
            return job
        old = job.priority_name
        Job.objects.filter(pk=job.pk).update(priority=priority)
        job.refresh_from_db()
        state.note(job, f"priority {old} → {job.priority_name}", actor=actor)
        request_schedule()
    return job


def job_cancel(*, job: Job, actor: AbstractBaseUser | None) -> Job:
    """Cancel ``job``: at once if it holds no process, else ask its supervisor.

    Returns the job refreshed. Cancelling a finished job is a no-op.
    """
    with transaction.atomic():
        job.refresh_from_db()
        if job.status in TERMINAL:
            return job
        if job.status in WAITING or job.status == JobStatus.ADMITTED:
            try:
                return state.transition(job, JobStatus.CANCELLED, reason="cancelled", actor=actor)
            except state.TransitionError:
                job.refresh_from_db()  # the launcher took it meanwhile: ask it instead
        # Running or restarting: the supervisor polls this flag and ends the process group.
        Job.objects.filter(pk=job.pk).update(cancel_requested=True)
        state.note(job, "cancel requested", actor=actor)
        job.refresh_from_db()
    return job


def queue_position(job: Job) -> int | None:
    """1-based position among the tenant's waiting jobs, or None if not waiting."""
    if job.status != JobStatus.QUEUED:
        return None
    # Ahead: higher priority, or the same priority and submitted earlier.
    ahead = Q(priority__gt=job.priority) | Q(priority=job.priority, created_at__lt=job.created_at)
    same_instant = Q(priority=job.priority, created_at=job.created_at, pk__lt=job.pk)
    waiting = Job.objects.filter(tenant_id=job.tenant_id, status=JobStatus.QUEUED)
    return waiting.filter(ahead | same_instant).count() + 1


# --- reports from the supervisor ---------------------------------------------------------


def job_heartbeat(*, job_id: int) -> bool:
    """Record that the job's supervisor is alive; return False if the job is not active.

    The step reached is written by the telemetry ingest, not here.
    """
    return Job.objects.filter(pk=job_id, status__in=ACTIVE).update(heartbeat_at=timezone.now()) == 1
