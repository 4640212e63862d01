"""Queues, jobs and their event history."""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from controlplane.jobs import artifacts
from controlplane.jobs.choices import (
    ACTIVE,
    DEFAULT_QUEUE_POLICY,
    NODE_STORED_STATES,
    TERMINAL,
    JobStatus,
    NodeState,
    PreemptionPolicy,
    PriorityClass,
    QueuePolicy,
    SyncStrategy,
    Workload,
)
from controlplane.tenancy.models import Tenant


class Queue(models.Model):
    """A tenant's ordered queue of jobs (priority, then submit time)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="queues")
    name = models.SlugField(default="default")
    policy = models.CharField(
        max_length=20, choices=QueuePolicy.choices, default=DEFAULT_QUEUE_POLICY
    )
    preemption = models.CharField(
        max_length=40, choices=PreemptionPolicy.choices, default=PreemptionPolicy.LOWER_PRIORITY
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="one_queue_name_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class Job(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=100)

    # Spec: what to run. Validated by jobs.spec.JobSpec before it reaches here.
    # Either a built-in workload, or a tenant's code bundle and the entrypoint run in it.
    workload = models.CharField(max_length=30, choices=Workload.choices, blank=True)
    # SET_NULL: an expired bundle leaves the record of what ran (hash, files, entrypoint).
    bundle = models.ForeignKey(
        "bundles.CodeBundle", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    bundle_sha256 = models.CharField(max_length=64, blank=True, default="")
    bundle_file_count = models.PositiveIntegerField(null=True, blank=True)
    entrypoint = models.JSONField(default=list, blank=True)  # argv: script or "-m", module, args
    env = models.JSONField(default=dict, blank=True)  # names checked by jobs.spec
    world_size = models.PositiveIntegerField()
    steps = models.PositiveIntegerField()
    sync = models.CharField(max_length=20, choices=SyncStrategy.choices)
    priority = models.PositiveSmallIntegerField(
        choices=PriorityClass.choices, default=PriorityClass.NORMAL
    )
    deadline = models.DateTimeField(null=True, blank=True)
    bandwidth_floor_mbps = models.PositiveIntegerField(default=0)
    bandwidth_ceiling_mbps = models.PositiveIntegerField(null=True, blank=True)
    hyperparameters = models.JSONField(default=dict, blank=True)
    # Labels a node must carry for this job's ranks (e.g. {"gpu": "h200"}); {}: any node.
    node_selector = models.JSONField(default=dict, blank=True)

    # Status: changed only through jobs.state.transition().
    status = models.CharField(
        max_length=20, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    status_reason = models.CharField(max_length=300, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # Run state, written by the supervisor.
    placement = models.JSONField(default=dict, blank=True)
    allocation_mbps = models.FloatField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    # Restarts allowed after failed attempts; None: settings.SYNCLANE_MAX_RESTARTS.
    max_restarts = models.PositiveSmallIntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    exit_reason = models.CharField(max_length=300, blank=True, default="")
    checkpoint_step = models.PositiveIntegerField(null=True, blank=True)
    # Step of the checkpoint the current (or last) run started from; None: from scratch.
    resumed_from_step = models.PositiveIntegerField(null=True, blank=True)
    # Fencing token of the supervisor that drives the run (workers.supervisor.lease): every
    # transition a supervisor makes matches it, so a supervisor that lost its lease changes nothing.
    fence = models.PositiveBigIntegerField(default=0)
    last_step = models.PositiveIntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Set by a scheduling pass that chose this job as a victim; the supervisor checkpoints
    # the run, and the job goes back to the queue (resuming from its checkpoint later).
    preempt_requested = models.BooleanField(default=False)
    wait_code = models.CharField(max_length=30, blank=True, default="")
    # How often a scheduling pass chose this job as a victim, and when it last did: the core's
    # eviction limit and back-off read them.
    evictions = models.PositiveIntegerField(default=0)
    evicted_at = models.DateTimeField(null=True, blank=True)
    # Launches in a row that a platform fault (Redis away, the control plane unreachable) sent
    # back to the queue, and when the last one did: the core's launch back-off reads them. A
    # launch that starts the run sets it back to 0.
    launch_faults = models.PositiveIntegerField(default=0)
    launch_fault_at = models.DateTimeField(null=True, blank=True)
    # Bytes of the run folder when the job ended (state.transition writes it; deleting the
    # artifacts resets it). The storage quota sums these instead of walking every finished
    # job's folder on each submit. None: not ended yet (the folder is walked live).
    artifact_bytes = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.name})"

    @property
    def priority_name(self) -> str:
        return PriorityClass(self.priority).label

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def restart_limit(self) -> int:
        """Restarts allowed after failed attempts (the job's own, else the setting)."""
        if self.max_restarts is not None:
            return self.max_restarts
        return int(settings.SYNCLANE_MAX_RESTARTS)

    @property
    def runs_code(self) -> bool:
        """True if the job runs a tenant's bundle rather than a built-in workload."""
        return bool(self.bundle_sha256)

    @property
    def code_label(self) -> str:
        """What the job runs, for pages: the workload, or bundle hash and entrypoint."""
        if not self.runs_code:
            return self.workload
        return f"{self.bundle_sha256[:12]} ({self.bundle_file_count} files): {self.entrypoint_text}"

    @property
    def entrypoint_text(self) -> str:
        return shlex.join(self.entrypoint) if self.entrypoint else ""

    @property
    def run_dir(self) -> Path:
        """The folder that holds this job's checkpoints and rank logs."""
        return artifacts.run_dir_of(self.pk)

    @property
    def wall_seconds(self) -> float | None:
        """Seconds from the first start to the end (to now while it runs); None if never started."""
        if self.started_at is None:
            return None
        end = self.finished_at or (timezone.now() if not self.is_terminal else None)
        return None if end is None else max(0.0, (end - self.started_at).total_seconds())

    @property
    def node_names(self) -> list[str]:
        """The nodes this job's ranks are placed on (placement "nodes", in node-rank order), or
        the one node its supervisor runs on (placement "node"); [] if none is known."""
        placement = self.placement if isinstance(self.placement, dict) else {}
        parts = [n for n in placement.get("nodes") or [] if isinstance(n, dict)]
        names = [n["node"] for n in parts if isinstance(n.get("node"), str)]
        single = placement.get("node")
        if isinstance(single, str) and single not in names:
            names.append(single)
        return names

    @property
    def placement_why(self) -> str:
        """Why the job's ranks are where they are (the scheduler's words); "" if not placed."""
        placement = self.placement if isinstance(self.placement, dict) else {}
        why = placement.get("why")
        return why if isinstance(why, str) else ""

    @property
    def rank_nodes(self) -> list[dict[str, object]]:
        """Where each rank runs: [{"node", "address", "ranks"}] in node-rank order."""
        placement = self.placement if isinstance(self.placement, dict) else {}
        rows = placement.get("nodes")
        if isinstance(rows, list) and rows:
            return [r for r in rows if isinstance(r, dict)]
        if isinstance(placement.get("node"), str):
            return [
                {"node": placement["node"], "address": "", "ranks": list(range(self.world_size))}
            ]
        return []

    @property
    def progress(self) -> float:
        """Fraction of steps done, from the last reported step (0.0 when none)."""
        if not self.last_step or not self.steps:
            return 0.0
        return min(1.0, self.last_step / self.steps)


class Node(models.Model):
    """A worker host: its slots and fabric bandwidth count while it is ready and seen alive.

    Each host's worker registers and refreshes its row (``workers.supervisor.node``); admins
    cordon, drain and uncordon it (``jobs.nodes``). ``status`` adds ``lost`` to the stored state.
    """

    name = models.CharField(max_length=200, unique=True)
    slots = models.PositiveIntegerField()
    fabric_mbps = models.PositiveIntegerField()
    last_seen = models.DateTimeField()
    # Where other nodes reach this one (the rendezvous of a job whose first node it is).
    address = models.CharField(max_length=255, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)  # {"gpu": "h200", "zone": "a"}
    state = models.CharField(
        max_length=10,
        choices=[(s.value, s.label) for s in NODE_STORED_STATES],
        default=NodeState.READY,
    )
    state_reason = models.CharField(max_length=300, blank=True, default="")
    state_changed_at = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.slots} slots)"

    def is_lost(self, now: dt.datetime | None = None) -> bool:
        """True if the node has been silent longer than SYNCLANE_NODE_LOST_AFTER_S."""
        silence = ((now or timezone.now()) - self.last_seen).total_seconds()
        return silence > settings.SYNCLANE_NODE_LOST_AFTER_S

    def status(self, now: dt.datetime | None = None) -> str:
        """``lost`` if silent too long, else the stored state (ready, cordoned, draining)."""
        return NodeState.LOST.value if self.is_lost(now) else self.state

    def schedulable(self, now: dt.datetime | None = None) -> bool:
        """True if new ranks may be placed here: ready and not lost."""
        return self.state == NodeState.READY and not self.is_lost(now)


class JobEvent(models.Model):
    """One entry of a job's history: a status transition, or a note (from == to)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True)
    from_status = models.CharField(max_length=20, choices=JobStatus.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=JobStatus.choices)
    reason = models.CharField(max_length=300, blank=True, default="")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_status or '∅'} → {self.to_status} ({self.reason})"


class QueueChange(models.Model):
    """A queued job was added, changed or removed: one entry of the scheduling pass's feed.

    Written by database triggers only (migration 0012), on any insert or delete of a queued
    job and any update of a column the scheduler reads where the job was or becomes queued,
    whoever writes it (a model save, a queryset update, raw SQL). A worker's pass keeps its
    queues between passes and reads only the jobs named here since its last pass
    (``jobs.queue_state``). ``xid`` is the writing transaction's id on PostgreSQL (its
    sequence ids commit out of order; transaction ids tell which writers may still commit);
    null on SQLite, where one writer at a time commits ids in order.
    """

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField()  # not a key: the job may be gone (deleted)
    xid = models.BigIntegerField(null=True, db_index=True)
    at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"#{self.pk}: job {self.job_id} at {self.at}"


class IdempotencyKey(models.Model):
    """A submit made with an ``Idempotency-Key`` header, and the answer it got.

    A retry with the same key (same user, within the window) gets this answer again
    instead of a second job. Kept in the database, not Redis: a retry often follows
    exactly the fault (a restart) that would have emptied Redis.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # SHA-256 of the request body in canonical JSON: the same key with another body is refused.
    fingerprint = models.CharField(max_length=64)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="one_idempotency_key_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key} -> job {self.job_id}"
