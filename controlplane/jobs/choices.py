"""Job states, their groups and the one table of allowed transitions; the jobs' vocabularies.

Sync strategies take their values from the runtime's protocol and priority classes and queue
policies from the scheduling core: those define them, these only add labels for forms.
"""

from __future__ import annotations

from django.db import models

from controlplane import scheduling as core
from workers.runtime import protocol


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
    # Running or restarting -> queued: the platform stopped the run (worker lost or shut
    # down); it resumes from its checkpoint when readmitted, never failed for our fault.
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.RESTARTING, S.PREEMPTED, S.QUEUED}),
    S.RESTARTING: frozenset({S.RUNNING, S.FAILED, S.CANCELLED, S.QUEUED}),
    # A preempted job returns to the queue and resumes from its checkpoint when readmitted.
    S.PREEMPTED: frozenset({S.QUEUED, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


class NodeState(models.TextChoices):
    """A node's state. An admin sets ``ready``, ``cordoned`` or ``draining``; ``lost`` is never
    stored: a node is lost while it has been silent longer than SYNCLANE_NODE_LOST_AFTER_S."""

    READY = "ready", "Ready"
    CORDONED = "cordoned", "Cordoned"  # no new placements; what runs there keeps running
    DRAINING = "draining", "Draining"  # cordoned, and its jobs checkpoint and requeue
    LOST = "lost", "Lost"


# The states an admin may set (lost comes from silence, never from a write).
NODE_STORED_STATES = (NodeState.READY, NodeState.CORDONED, NodeState.DRAINING)


def node_queue(node: str) -> str:
    """The Celery queue a node's worker consumes besides the shared ones: ``node.<name>``."""
    return f"node.{node}"


class PriorityClass(models.IntegerChoices):
    """Labels for the scheduling core's priority classes (``core.PriorityClass`` defines them)."""

    LOW = core.PriorityClass.LOW, "low"
    NORMAL = core.PriorityClass.NORMAL, "normal"
    HIGH = core.PriorityClass.HIGH, "high"
    CRITICAL = core.PriorityClass.CRITICAL, "critical"

    @classmethod
    def from_name(cls, name: str) -> PriorityClass | None:
        """Return the class named ``name`` (e.g. "high"), or None if there is none."""
        for member in cls:
            if member.label == name:
                return member
        return None


class SyncStrategy(models.TextChoices):
    """The strategies a job may ask for: exactly ``protocol.SYNC_STRATEGIES`` (a test checks)."""

    FULL = protocol.SYNC_FULL, "Full (plain DDP all-reduce)"
    ADAPTIVE = protocol.SYNC_ADAPTIVE, "Adaptive selective sync"
    POWERSGD = protocol.SYNC_POWERSGD, "PowerSGD compression"
    LOCALSGD = protocol.SYNC_LOCALSGD, "Local SGD with periodic averaging"


class Workload(models.TextChoices):
    """The built-in catalogue (modules in workers/workloads, WORKLOAD_MODULES maps them)."""

    TINY_GPT = "tiny_gpt", "Tiny GPT (character level)"
    SHAPES_CNN = "shapes_cnn", "Shapes CNN (conv classifier, 16x16 images)"
    TOPICS_ENCODER = "topics_encoder", "Topics encoder (transformer classifier)"
    NOOP = "noop", "No-op (one empty step; measures the control plane itself)"


class QueuePolicy(models.TextChoices):
    """Labels for the scheduling core's queue policies (``core.QueuePolicy`` defines them)."""

    STRICT_FIFO = (
        core.QueuePolicy.STRICT_FIFO,
        "StrictFIFO: a head that does not fit blocks the rest",
    )
    BEST_EFFORT_FIFO = (
        core.QueuePolicy.BEST_EFFORT_FIFO,
        "BestEffortFIFO: later jobs that fit may pass",
    )


class PreemptionPolicy(models.TextChoices):
    """Labels for the core's per-queue preemption policies (``core.PreemptionPolicy``)."""

    NEVER = core.PreemptionPolicy.NEVER, "Never: its jobs preempt nothing"
    LOWER_PRIORITY = (
        core.PreemptionPolicy.LOWER_PRIORITY,
        "LowerPriority: preempt its own lower-priority jobs",
    )
    LOWER_OR_NEWER_EQUAL_PRIORITY = (
        core.PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
        "LowerOrNewerEqualPriority: also its own newer jobs of equal priority",
    )


# A tenant without a queue of its own gets the core's default policy.
DEFAULT_QUEUE_POLICY = QueuePolicy(core.DEFAULT_QUEUE_POLICY)
