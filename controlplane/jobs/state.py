"""The one door for changing a job's status.

``transition()`` checks the allowed-transition table, applies the change with a
conditional UPDATE (``WHERE status = <expected>``) so two racing writers cannot
both win, records a JobEvent, and publishes the change after commit.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from controlplane.jobs.choices import ALLOWED_TRANSITIONS, TERMINAL, JobStatus
from controlplane.jobs.models import Job, JobEvent
from controlplane.lib.publish import publish_on_commit
from controlplane.telemetry.groups import job_group, tenant_group


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
    actor: AbstractBaseUser | None = None,
    expected: str | None = None,
    **fields: Any,
) -> Job:
    """Move ``job`` to status ``to`` and return it refreshed.

    ``expected`` is the status the caller believes the job has (default: ``job.status``);
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
    with transaction.atomic():
        touched = Job.objects.filter(pk=job.pk, status=expected).update(**values)
        if touched != 1:
            raise TransitionError(f"job {job.pk} is no longer {expected}")
        JobEvent.objects.create(
            job=job, from_status=expected, to_status=to, reason=reason[:300], actor=actor
        )
        job.refresh_from_db()
        message = status_message(job, previous=expected)
        publish_on_commit(job_group(job.pk), message)
        publish_on_commit(tenant_group(job.tenant_id), message)
    return job


def note(job: Job, reason: str, *, actor: AbstractBaseUser | None = None) -> JobEvent:
    """Record an event that does not change the status (e.g. "cancel requested")."""
    return JobEvent.objects.create(
        job=job, from_status=job.status, to_status=job.status, reason=reason[:300], actor=actor
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
        "last_step": job.last_step,
        "steps": job.steps,
        "at": timezone.now().isoformat(),
    }
