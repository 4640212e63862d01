"""Queues, jobs and their event history."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from controlplane.jobs.choices import (
    ACTIVE,
    TERMINAL,
    JobStatus,
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
        max_length=20, choices=QueuePolicy.choices, default=QueuePolicy.STRICT_FIFO
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
    workload = models.CharField(max_length=30, choices=Workload.choices)
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
    exit_code = models.IntegerField(null=True, blank=True)
    exit_reason = models.CharField(max_length=300, blank=True, default="")
    checkpoint_step = models.PositiveIntegerField(null=True, blank=True)
    last_step = models.PositiveIntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Set by a scheduling pass that chose this job as a victim; the supervisor checkpoints
    # the run, and the job goes back to the queue (resuming from its checkpoint later).
    preempt_requested = models.BooleanField(default=False)
    wait_code = models.CharField(max_length=30, blank=True, default="")

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
    def run_dir(self) -> Path:
        """The folder that holds this job's checkpoints and rank logs."""
        return Path(settings.SYNCLANE_JOBS_DIR) / f"job-{self.pk}"

    @property
    def progress(self) -> float:
        """Fraction of steps done, from the last reported step (0.0 when none)."""
        if not self.last_step or not self.steps:
            return 0.0
        return min(1.0, self.last_step / self.steps)


class Node(models.Model):
    """A worker host: its slots and fabric bandwidth count while it is seen alive."""

    name = models.CharField(max_length=200, unique=True)
    slots = models.PositiveIntegerField()
    fabric_mbps = models.PositiveIntegerField()
    last_seen = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} ({self.slots} slots)"


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
