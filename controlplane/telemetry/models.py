"""What runs report: downsampled metric samples and alarms."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.jobs.models import Job
from workers.runtime import protocol


class MetricSample(models.Model):
    """One stored step report of a job (rank 0), downsampled by the ingest loop."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="samples")
    step = models.PositiveIntegerField()
    reported_at = models.DateTimeField()
    data = models.JSONField()

    class Meta:
        ordering = ["job", "step", "id"]
        indexes = [models.Index(fields=["job", "step"])]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}"


class AlarmKind(models.TextChoices):
    """A run's alarm kinds (``protocol.ALARM_KINDS``, a test checks) and the control plane's own."""

    SYNC_DRIFT = protocol.ALARM_SYNC_DRIFT, "Sync drift"
    LINK_DEGRADED = protocol.ALARM_LINK_DEGRADED, "Degraded link"
    STRAGGLER = protocol.ALARM_STRAGGLER, "Straggler"
    QUOTA = "quota", "Quota"  # for the control plane's own alarms; a run never sends it


class Alarm(models.Model):
    """An alarm raised by a run (or the control plane); cleared_at is None while open."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="alarms")
    kind = models.CharField(max_length=30, choices=AlarmKind.choices)
    rank = models.IntegerField(null=True, blank=True)
    step = models.PositiveIntegerField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    detail = models.CharField(max_length=300, blank=True, default="")
    raised_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_step = models.PositiveIntegerField(null=True, blank=True)
    acknowledged = models.BooleanField(default=False)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-raised_at", "-id"]
        indexes = [models.Index(fields=["job", "kind", "cleared_at"])]

    def __str__(self) -> str:
        return f"{self.kind} on job {self.job_id} ({'open' if self.is_open else 'cleared'})"

    @property
    def is_open(self) -> bool:
        return self.cleared_at is None


class LinkState(models.Model):
    """The latest measurement of one rank-to-rank path of a job (one row per pair)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="links")
    src = models.PositiveIntegerField()
    dst = models.PositiveIntegerField()
    bandwidth_bps = models.FloatField(null=True, blank=True)
    latency_s = models.FloatField(null=True, blank=True)
    jitter_s = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=20, default="ok")
    # The first probe was slower than the jitter threshold; the figures are the better of two.
    reissued = models.BooleanField(default=False)
    step = models.PositiveIntegerField(null=True, blank=True)
    measured_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "src", "dst"]
        constraints = [
            models.UniqueConstraint(fields=["job", "src", "dst"], name="one_link_state_per_pair")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} link {self.src}->{self.dst} {self.state}"
