"""Telemetry ingest: run Redis streams -> database (downsampled) + channels groups.

    python manage.py telemetry_ingest

Runs write to ``telemetry_stream(job_id)`` and add the job id to
ACTIVE_STREAMS_KEY. Each ``ingest_step`` reads a batch from every active stream,
stores what should be kept in bulk, forwards every message to the job's group, and
retires the streams of finished jobs once drained. Read positions live in Redis so
a restarted ingest resumes where it stopped.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

from controlplane.jobs.choices import TERMINAL
from controlplane.jobs.models import Job
from controlplane.lib.publish import publish
from controlplane.telemetry.groups import job_group, tenant_group
from controlplane.telemetry.models import Alarm, MetricSample
from workers.runtime import protocol

log = logging.getLogger(__name__)

CURSORS_KEY = "synclane:telemetry:cursors"
BATCH = 500


@dataclass
class Ingest:
    """The ingest loop's state: a Redis client and per-job downsampling clocks."""

    client: redis.Redis
    sample_interval_s: float = field(default_factory=lambda: settings.SYNCLANE_SAMPLE_INTERVAL_S)
    last_stored: dict[int, float] = field(default_factory=dict)

    @classmethod
    def from_settings(cls) -> Ingest:
        return cls(client=redis.Redis.from_url(settings.REDIS_URL, decode_responses=True))

    def step(self, *, block_ms: int = 500) -> int:
        """Read, store and forward one batch; return the number of messages handled."""
        job_ids = sorted(int(j) for j in self.client.smembers(protocol.ACTIVE_STREAMS_KEY))
        if not job_ids:
            return 0
        cursors = self.client.hgetall(CURSORS_KEY)
        streams = {protocol.telemetry_stream(j): cursors.get(str(j), "0-0") for j in job_ids}
        batches = self.client.xread(streams, count=BATCH, block=block_ms) or []
        handled = 0
        read: set[int] = set()
        for stream, entries in batches:
            job_id = int(stream.rsplit(":", 1)[1])
            read.add(job_id)
            handled += self._handle(job_id, entries)
            self.client.hset(CURSORS_KEY, str(job_id), entries[-1][0])
        self._retire_finished(set(job_ids) - read)
        return handled

    def _handle(self, job_id: int, entries: list[tuple[str, dict[str, str]]]) -> int:
        job = Job.objects.filter(pk=job_id).only("pk", "tenant_id", "last_step").first()
        if job is None:
            return len(entries)
        messages = [m for m in (_decode(fields) for _, fields in entries) if m is not None]
        samples, alarms, last_step = [], [], job.last_step
        for kind, data in messages:
            if kind == protocol.MSG_METRICS:
                step = int(data.get("step", 0))
                last_step = max(last_step or 0, step)
                if self._keep(job_id, data):
                    samples.append(MetricSample(job=job, step=step, reported_at=_when(data), data=data))
            elif kind == protocol.MSG_ALARM:
                alarms.append(data)
        with transaction.atomic():
            MetricSample.objects.bulk_create(samples)
            for data in alarms:
                record_alarm(job, data)
            if last_step != job.last_step:
                Job.objects.filter(pk=job_id).update(last_step=last_step)
        group = job_group(job_id)
        for kind, data in messages:
            publish(group, {"type": kind, "job": job_id, "data": data})
            if kind == protocol.MSG_ALARM:
                publish(tenant_group(job.tenant_id), {"type": kind, "job": job_id, "data": data})
        return len(entries)

    def _keep(self, job_id: int, data: dict[str, Any]) -> bool:
        """Downsample: keep one sample per interval, and every evaluation or final step."""
        ts = float(data.get("ts", 0.0))
        if "val_loss" in data or data.get("final"):
            self.last_stored[job_id] = ts
            return True
        if ts - self.last_stored.get(job_id, float("-inf")) >= self.sample_interval_s:
            self.last_stored[job_id] = ts
            return True
        return False

    def _retire_finished(self, idle_job_ids: Iterable[int]) -> None:
        """Drop the streams of finished jobs that had nothing left to read."""
        idle = list(idle_job_ids)
        if not idle:
            return
        for job_id in Job.objects.filter(pk__in=idle, status__in=TERMINAL).values_list("pk", flat=True):
            self.client.srem(protocol.ACTIVE_STREAMS_KEY, str(job_id))
            self.client.delete(protocol.telemetry_stream(job_id))
            self.client.hdel(CURSORS_KEY, str(job_id))
            self.last_stored.pop(job_id, None)


def record_alarm(job: Job, data: dict[str, Any]) -> Alarm | None:
    """Open an alarm, or clear the open one of the same kind (and rank); return it."""
    kind = str(data.get("kind", ""))
    rank = data.get("rank")
    when = _when(data)
    if data.get("state") == "cleared":
        alarm = Alarm.objects.filter(job=job, kind=kind, rank=rank, cleared_at__isnull=True).first()
        if alarm is not None:
            alarm.cleared_at = when
            alarm.save(update_fields=["cleared_at"])
        return alarm
    return Alarm.objects.create(
        job=job,
        kind=kind,
        rank=rank,
        step=data.get("step"),
        value=data.get("value"),
        threshold=data.get("threshold"),
        detail=str(data.get("detail", ""))[:300],
        raised_at=when,
    )


def _decode(fields: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    kind = fields.get("type")
    if kind not in protocol.MESSAGE_TYPES:
        log.warning("dropping telemetry entry of unknown type %r", kind)
        return None
    try:
        data = json.loads(fields.get("data", "{}"))
    except json.JSONDecodeError:
        log.warning("dropping telemetry entry with malformed data")
        return None
    return (kind, data) if isinstance(data, dict) else None


def _when(data: dict[str, Any]) -> dt.datetime:
    ts = data.get("ts")
    if isinstance(ts, int | float):
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    return dt.datetime.now(tz=dt.UTC)
