"""Writes about jobs: submit, cancel, admit, and the supervisor's reports.

Each service is keyword-only, runs in one transaction, and schedules its side
effects (Celery enqueues, websocket messages) on commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from controlplane.jobs import state
from controlplane.jobs.choices import ACTIVE, TERMINAL, WAITING, JobStatus
from controlplane.jobs.models import Job, Queue
from controlplane.jobs.spec import JobSpec
from controlplane.tenancy.models import Tenant

log = logging.getLogger(__name__)


def _enqueue_on_commit(task_name: str, *args: object) -> None:
    # Imported here: the Celery app imports Django settings, not the other way round.
    from workers.celery import app

    transaction.on_commit(lambda: app.send_task(task_name, args=args))


def request_schedule() -> None:
    """Ask the scheduler for a pass once the current transaction commits."""
    _enqueue_on_commit("workers.tasks.schedule_tick")


def job_submit(*, tenant: Tenant, spec: JobSpec, actor: AbstractBaseUser | None) -> Job:
    """Create a queued job for ``tenant`` from a validated spec and request scheduling."""
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


@dataclass(frozen=True)
class Usage:
    slots: int
    jobs: int


def tenant_usage(tenant: Tenant) -> Usage:
    """Slots and job count the tenant's active jobs hold now."""
    active = Job.objects.filter(tenant=tenant, status__in=ACTIVE)
    return Usage(slots=active.aggregate(n=Sum("world_size"))["n"] or 0, jobs=active.count())


def cluster_slots_used() -> int:
    return Job.objects.filter(status__in=ACTIVE).aggregate(n=Sum("world_size"))["n"] or 0


def jobs_admit() -> list[Job]:
    """Admit queued jobs FIFO (priority, then submit time) within slot quotas.

    A tenant's queue is StrictFIFO: a head that does not fit blocks the jobs behind it.
    Returns the jobs admitted; each gets a launch task enqueued on commit. Waiting jobs
    get a readable reason.
    """
    admitted: list[Job] = []
    with transaction.atomic():
        # Serialise admission passes: lock the tenant rows (SQLite locks the whole file).
        tenants = {t.pk: t for t in Tenant.objects.select_for_update().order_by("pk")}
        free_cluster = settings.SYNCLANE_CLUSTER_SLOTS - cluster_slots_used()
        usage = {pk: tenant_usage(t) for pk, t in tenants.items()}
        blocked: set[int] = set()
        waiting = Job.objects.filter(status=JobStatus.QUEUED).order_by("-priority", "created_at")
        for job in waiting:
            tenant = tenants[job.tenant_id]
            reason = _why_not(job, tenant, usage[tenant.pk], free_cluster, blocked)
            if reason:
                blocked.add(tenant.pk)
                if job.status_reason != reason:
                    Job.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
                        status_reason=reason
                    )
                continue
            state.transition(job, JobStatus.ADMITTED, reason="admitted")
            usage[tenant.pk] = Usage(usage[tenant.pk].slots + job.world_size, usage[tenant.pk].jobs + 1)
            free_cluster -= job.world_size
            _enqueue_on_commit("workers.tasks.launch_job", job.pk)
            admitted.append(job)
    return admitted


def _why_not(job: Job, tenant: Tenant, usage: Usage, free_cluster: int, blocked: set[int]) -> str:
    """Return why ``job`` cannot be admitted now, or "" if it can."""
    if tenant.pk in blocked:
        return f"waiting: behind an earlier job of tenant {tenant.slug}"
    if job.world_size > tenant.slot_quota:
        return f"waiting: needs {job.world_size} slots, tenant {tenant.slug} quota is {tenant.slot_quota}"
    if usage.slots + job.world_size > tenant.slot_quota:
        return f"waiting: tenant {tenant.slug} at {usage.slots}/{tenant.slot_quota} slots"
    if usage.jobs >= tenant.max_running_jobs:
        return f"waiting: tenant {tenant.slug} at {usage.jobs}/{tenant.max_running_jobs} running jobs"
    if job.world_size > free_cluster:
        return f"waiting: cluster has {max(free_cluster, 0)} free slots, needs {job.world_size}"
    return ""


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


def job_heartbeat(*, job_id: int, last_step: int | None = None) -> bool:
    """Record that the job's supervisor is alive; return False if the job is not active."""
    values: dict[str, object] = {"heartbeat_at": timezone.now()}
    if last_step is not None:
        values["last_step"] = last_step
    return Job.objects.filter(pk=job_id, status__in=ACTIVE).update(**values) == 1
