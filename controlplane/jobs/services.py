"""Writes about jobs: submit, cancel, admit, and the supervisor's reports.

Each service is keyword-only, runs in one transaction, and schedules its side
effects (Celery enqueues, websocket messages) on commit.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import PurePosixPath

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.bundles.access import find_tenant_bundle
from controlplane.bundles.models import CodeBundle
from controlplane.bundles.services import bundle_mark_used, tenant_storage_bytes
from controlplane.jobs import artifacts, state
from controlplane.jobs.choices import ACTIVE, TERMINAL, WAITING, JobStatus, PriorityClass
from controlplane.jobs.models import Job, Queue
from controlplane.jobs.spec import JobSpec, SpecError
from controlplane.lib.conflict import Conflict
from controlplane.lib.tasks import enqueue_once_on_commit
from controlplane.scheduling import Cluster
from controlplane.tenancy.access import AnyUser, recorded_actor
from controlplane.tenancy.models import Tenant

log = logging.getLogger(__name__)


# Set while a scheduling pass is queued and has not started: requests meanwhile send none.
SCHEDULE_PENDING_KEY = "synclane:schedule:pending"
# If the queued pass is lost (a worker killed before it ran), requests send again after this.
SCHEDULE_PENDING_TTL_S = 10.0


def request_schedule() -> None:
    """Ask the scheduler for a pass once the current transaction commits.

    Requests are coalesced: while a pass is queued and has not started, more requests send no
    other, since that pass reads their rows too. A burst of submits and job ends then costs a
    few passes instead of one each (each pass has a fixed cost: locks, running jobs, quotas).
    """
    enqueue_once_on_commit(
        "workers.tasks.schedule_tick",
        pending_key=SCHEDULE_PENDING_KEY,
        ttl_s=SCHEDULE_PENDING_TTL_S,
    )


def check_fits(*, tenant: Tenant, spec: JobSpec, capacity: Cluster | None = None) -> None:
    """Raise SpecError if the job is larger than the cluster itself.

    Such a job could never run, whatever the quotas, and would block a StrictFIFO queue.
    A job over its tenant's quota is accepted: it waits, with that reason, for the quota.
    ``capacity`` is the cluster's size when the caller has read it already.
    """
    from controlplane.jobs.adapters import MBPS, cluster_capacity

    errors: dict[str, list[str]] = {}
    if capacity is None:
        capacity = cluster_capacity(include_cordoned=True)
    if capacity.slots and spec.world_size > capacity.slots:  # 0: no live worker now; wait
        errors["world_size"] = [f"needs {spec.world_size} slots; the cluster has {capacity.slots}"]
    fabric_mbps = capacity.fabric_bps / MBPS
    if fabric_mbps and spec.bandwidth_floor_mbps > fabric_mbps:
        errors["bandwidth_floor_mbps"] = [f"exceeds the cluster fabric of {fabric_mbps:g} Mbit/s"]
    if errors:
        raise SpecError(errors)


def check_storage(*, tenant: Tenant) -> None:
    """Raise SpecError (field ``tenant``) when the tenant is at or over its storage quota.

    What a full quota blocks is new submits: running jobs keep writing (stopping them would
    lose work), and deleting finished jobs' artifacts frees room.
    """
    limit = artifacts.storage_limit_bytes()
    if limit is None:
        return
    used = tenant_storage_bytes(tenant)
    if used >= limit:
        mb = 1024 * 1024
        raise SpecError(
            {
                "tenant": [
                    f"storage quota exceeded: {tenant.slug}'s job artifacts and code bundles use "
                    f"{used / mb:.1f} MB of {limit / mb:.0f} MB (SYNCLANE_TENANT_STORAGE_MB); "
                    "delete finished jobs' artifacts or unused bundles to submit again"
                ]
            }
        )


def resolve_code(*, tenant: Tenant, spec: JobSpec) -> CodeBundle | None:
    """The tenant's bundle a code job names (None for a built-in workload).

    Raises SpecError if the tenant has no such bundle (another tenant's bundle is not
    found either) or the entrypoint's script or module is not in it.
    """
    if not spec.runs_code:
        return None
    bundle = find_tenant_bundle(tenant, spec.code)
    if bundle is None:
        raise SpecError({"code": [f"no bundle {spec.code!r} in tenant {tenant.slug}"]})
    argv = spec.entrypoint
    if argv[0] == "-m" and not bundle.has_module(argv[1]):
        raise SpecError({"entrypoint": [f"module {argv[1]!r} is not in the bundle"]})
    if argv[0] != "-m" and str(PurePosixPath(argv[0])) not in bundle.python_files:
        raise SpecError({"entrypoint": [f"{argv[0]!r} is not a file of the bundle"]})
    return bundle


def job_submit(*, tenant: Tenant, spec: JobSpec, actor: AnyUser | None) -> Job:
    """Create a queued job for ``tenant`` from a validated spec and request scheduling.

    Raises SpecError (nothing written) if the job could never be admitted, the tenant is
    over its storage quota, or the job names a bundle the tenant does not have.
    """
    check_fits(tenant=tenant, spec=spec)
    check_storage(tenant=tenant)
    bundle = resolve_code(tenant=tenant, spec=spec)
    with transaction.atomic():
        queue, _ = Queue.objects.get_or_create(tenant=tenant, name="default")
        job = _new_job(tenant, queue, spec, bundle, actor)
        job.save()
        state.note(job, "submitted", actor=actor)
        if bundle is not None:
            bundle_mark_used(bundle=bundle)
        request_schedule()
    return job


def batch_limit() -> int:
    """Most jobs one batch submit may hold (SYNCLANE_SUBMIT_BATCH_MAX)."""
    return int(settings.SYNCLANE_SUBMIT_BATCH_MAX)


def jobs_submit(*, tenant: Tenant, specs: Sequence[JobSpec], actor: AnyUser | None) -> list[Job]:
    """Create queued jobs for ``tenant`` from validated specs, all or none, in their order.

    What one submit checks is checked for each job: a job larger than the cluster, or naming
    a bundle the tenant does not have, refuses the whole batch with a SpecError whose fields
    are ``jobs[i].<field>``; a full storage quota is ``tenant``. Nothing is written then.
    One scheduling pass is requested for the batch.
    """
    from controlplane.jobs.adapters import cluster_capacity

    if not 1 <= len(specs) <= batch_limit():
        raise SpecError({"jobs": [f"must hold 1 to {batch_limit()} jobs, not {len(specs)}"]})
    errors: dict[str, list[str]] = {}
    capacity = cluster_capacity(include_cordoned=True)
    bundles: list[CodeBundle | None] = []
    for i, spec in enumerate(specs):
        try:
            check_fits(tenant=tenant, spec=spec, capacity=capacity)
            bundles.append(resolve_code(tenant=tenant, spec=spec))
        except SpecError as exc:
            errors.update({f"jobs[{i}].{field}": why for field, why in exc.errors.items()})
    try:
        check_storage(tenant=tenant)
    except SpecError as exc:
        errors.update(exc.errors)
    if errors:
        raise SpecError(errors)
    with transaction.atomic():
        queue, _ = Queue.objects.get_or_create(tenant=tenant, name="default")
        jobs = Job.objects.bulk_create(
            [_new_job(tenant, queue, s, b, actor) for s, b in zip(specs, bundles, strict=True)]
        )
        state.note_many(jobs, "submitted", actor=actor)
        for bundle in {b.pk: b for b in bundles if b is not None}.values():
            bundle_mark_used(bundle=bundle)
        request_schedule()
    return jobs


def _new_job(
    tenant: Tenant, queue: Queue, spec: JobSpec, bundle: CodeBundle | None, actor: AnyUser | None
) -> Job:
    """The queued job a spec makes (not saved yet)."""
    return Job(
        tenant=tenant,
        queue=queue,
        submitted_by=recorded_actor(actor),
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
        max_restarts=spec.max_restarts,
        bundle=bundle,
        bundle_sha256=bundle.sha256 if bundle else "",
        bundle_file_count=bundle.file_count if bundle else None,
        entrypoint=list(spec.entrypoint),
        env=spec.env,
        node_selector=spec.node_selector,
        status=JobStatus.QUEUED,
        status_reason="waiting for the scheduler",
    )


def job_set_priority(*, job: Job, priority: int, actor: AnyUser | None) -> Job:
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


def job_cancel(*, job: Job, actor: AnyUser | None) -> Job:
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


class ArtifactsInUse(Conflict):
    """The job is not finished: its run still writes to its folder."""


def job_delete_artifacts(*, job: Job, actor: AnyUser | None) -> int:
    """Delete a finished job's folder (checkpoints, logs, outputs); return the bytes freed.

    Raises ArtifactsInUse for a job that is not terminal. Links inside are removed, never
    followed (``shutil.rmtree`` works on file descriptors here).
    """
    if not job.is_terminal:
        raise ArtifactsInUse(f"job {job.pk} is {job.status}; its artifacts can go once it ends")
    freed = artifacts.folder_bytes(job.run_dir)
    shutil.rmtree(job.run_dir, ignore_errors=True)
    Job.objects.filter(pk=job.pk).update(artifact_bytes=artifacts.folder_bytes(job.run_dir))
    state.note(job, f"artifacts deleted ({freed} bytes)", actor=actor)
    return freed
