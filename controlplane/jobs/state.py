"""The one door for changing a job's status.

``transition()`` checks the allowed-transition table, applies the change with a
conditional UPDATE (``WHERE status = <expected>``) so two racing writers cannot
both win, records a JobEvent, and publishes the change after commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.jobs import artifacts
from controlplane.jobs.choices import ALLOWED_TRANSITIONS, TERMINAL, JobStatus
from controlplane.jobs.models import Job, JobEvent
from controlplane.lib.publish import publish_on_commit
from controlplane.telemetry.groups import job_group, tenant_group
from controlplane.tenancy.access import AnyUser, recorded_actor


class TransitionError(Exception):
    """The transition is not in the table, or the job moved on meanwhile."""


def can_transition(current: str, to: str) -> bool:
    return JobStatus(to) in ALLOWED_TRANSITIONS[JobStatus(current)]


# Timestamps set by entering a state. admitted_at is renewed on every admission: the
# scheduling core treats it as the job's start, and its proof that two jobs never preempt
# each other needs it to grow with admission order. started_at keeps the first start.
_STAMP_EVERY_TIME = {JobStatus.ADMITTED: "admitted_at"}
_STAMP_FIRST_TIME = {JobStatus.RUNNING: "started_at"}


def transition(
    job: Job,
    to: str,
    *,
    reason: str,
    actor: AnyUser | None = None,
    expected: str | None = None,
    fence: int | None = None,
    **fields: Any,
) -> Job:
    """Move ``job`` to status ``to`` and return it refreshed.

    ``expected`` is the status the caller believes the job has (default: ``job.status``);
    ``fence`` is the supervisor's fencing token: when given, the UPDATE also requires
    ``Job.fence == fence``, so a supervisor whose lease was taken over changes nothing.
    ``fields`` are further columns written in the same UPDATE (e.g. ``exit_code``).
    Raises TransitionError when the move is not allowed or the row changed meanwhile.
    """
    expected = expected or job.status
    if not can_transition(expected, to):
        raise TransitionError(f"job {job.pk}: {expected} → {to} is not allowed")
    now = timezone.now()
    values: dict[str, Any] = {"status": to, "status_reason": reason[:300], **fields}
    if stamp := _STAMP_EVERY_TIME.get(JobStatus(to)):
        values[stamp] = now
    if (stamp := _STAMP_FIRST_TIME.get(JobStatus(to))) and getattr(job, stamp) is None:
        values[stamp] = now
    if JobStatus(to) in TERMINAL:
        values.setdefault("finished_at", now)
        # The run has stopped writing: its folder's size is final (the storage quota reads it).
        values.setdefault("artifact_bytes", artifacts.folder_bytes(job.run_dir))
    with transaction.atomic():
        rows = Job.objects.filter(pk=job.pk, status=expected)
        if fence is not None:
            rows = rows.filter(fence=fence)
        if rows.update(**values) != 1:
            held = "" if fence is None else f" under fence {fence}"
            raise TransitionError(f"job {job.pk} is no longer {expected}{held}")
        JobEvent.objects.create(
            job=job,
            from_status=expected,
            to_status=to,
            reason=reason[:300],
            actor=recorded_actor(actor),
        )
        job.refresh_from_db()
        message = status_message(job, previous=expected)
        publish_on_commit(job_group(job.pk), message)
        publish_on_commit(tenant_group(job.tenant_id), message)
    return job


def note(job: Job, reason: str, *, actor: AnyUser | None = None) -> JobEvent:
    """Record an event that does not change the status (e.g. "cancel requested")."""
    event = _note_event(job, reason, actor)
    event.save()
    return event


def note_many(jobs: Sequence[Job], reason: str, *, actor: AnyUser | None = None) -> None:
    """``note`` for each of ``jobs`` (the same reason), in one INSERT."""
    JobEvent.objects.bulk_create(_note_event(job, reason, actor) for job in jobs)


def _note_event(job: Job, reason: str, actor: AnyUser | None) -> JobEvent:
    return JobEvent(
        job=job,
        from_status=job.status,
        to_status=job.status,
        reason=reason[:300],
        actor=recorded_actor(actor),
    )


def status_message(job: Job, *, previous: str | None = None) -> dict[str, Any]:
    """The websocket ``status`` message for a job as it is now."""
    return {
        "type": "status",
        "job": job.pk,
        "status": job.status,
        "previous": previous,
        "reason": job.status_reason,
        "restarts": job.restarts,
        "max_restarts": job.restart_limit,
        "resumed_from_step": job.resumed_from_step,
        "last_step": job.last_step,
        "steps": job.steps,
        "at": timezone.now().isoformat(),
    }
