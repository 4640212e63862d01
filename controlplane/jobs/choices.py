"""Job states, their groups and the one table of allowed transitions."""

from __future__ import annotations

from django.db import models


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    ADMITTED = "admitted", "Admitted"
    RUNNING = "running", "Running"
    RESTARTING = "restarting", "Restarting"
    PREEMPTED = "preempted", "Preempted"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


S = JobStatus

# Waiting for admission.
WAITING = frozenset({S.QUEUED, S.PREEMPTED})
# Holding slots (and bandwidth): counted against quotas.
ACTIVE = frozenset({S.ADMITTED, S.RUNNING, S.RESTARTING})
# Done for good; no transition leaves these.
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})

ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.ADMITTED, S.CANCELLED}),
    # An admitted job whose launch could not start goes back to the queue or fails.
    S.ADMITTED: frozenset({S.RUNNING, S.QUEUED, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.RESTARTING, S.PREEMPTED}),
    S.RESTARTING: frozenset({S.RUNNING, S.FAILED, S.CANCELLED}),
    # A preempted job returns to the queue and resumes from its checkpoint when readmitted.
    S.PREEMPTED: frozenset({S.QUEUED, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


class PriorityClass(models.IntegerChoices):
    LOW = 100, "low"
    NORMAL = 200, "normal"
    HIGH = 300, "high"
    CRITICAL = 400, "critical"

    @classmethod
    def from_name(cls, name: str) -> PriorityClass | None:
        """Return the class named ``name`` (e.g. "high"), or None if there is none."""
        for member in cls:
            if member.label == name:
                return member
        return None


class SyncStrategy(models.TextChoices):
    FULL = "full", "Full (plain DDP all-reduce)"
    ADAPTIVE = "adaptive", "Adaptive selective sync"
    POWERSGD = "powersgd", "PowerSGD compression"
    LOCALSGD = "localsgd", "Local SGD with periodic averaging"


class Workload(models.TextChoices):
    TINY_GPT = "tiny_gpt", "Tiny GPT (character level)"


class QueuePolicy(models.TextChoices):
    STRICT_FIFO = "strict_fifo", "StrictFIFO: a head that does not fit blocks the rest"
    BEST_EFFORT_FIFO = "best_effort_fifo", "BestEffortFIFO: later jobs that fit may pass"
