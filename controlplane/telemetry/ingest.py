"""Telemetry ingest: run Redis streams -> database (downsampled) + channels groups.

    python manage.py telemetry_ingest

Runs write to ``telemetry_stream(job_id)`` and add the job id to
ACTIVE_STREAMS_KEY. The streams to read are those of every job the database says is
running or restarting, plus the active set (a finished job's last messages): a Redis
restart empties the set, and the database stays the record of what should be
streaming. Each ``Ingest.step`` reads a batch from every such stream,
stores what should be kept in bulk (samples, alarms, the latest state of each link),
hands every message to the fan-out for the job's group (alarms and a throttled metrics
summary also to the tenant and cluster groups), and retires the streams of finished
jobs once drained. Read positions live in Redis so
a restarted ingest resumes where it stopped.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.jobs.choices import TERMINAL, JobStatus
from controlplane.jobs.models import Job
from controlplane.telemetry.fanout import Fanout, Outgoing, shared_fanout
from controlplane.telemetry.groups import CLUSTER_GROUP, job_group, tenant_group
from controlplane.telemetry.models import Alarm, LinkState, MetricSample
from controlplane.telemetry.series import LinkCell, link_cells, link_matrix
from workers.runtime import protocol

log = logging.getLogger(__name__)

CURSORS_KEY = "synclane:telemetry:cursors"
BATCH = 500
RETIRE_AFTER = dt.timedelta(seconds=30)
# Jobs whose ranks are (or are about to be) reporting: their streams are read even when
# the active set does not name them.
STREAMING = (JobStatus.RUNNING, JobStatus.RESTARTING)


# Tenant and cluster pages get a per-job summary of metrics at most this often.
SUMMARY_INTERVAL_S = 1.0
SUMMARY_FIELDS = (
    "step",
    "loss",
    "samples_per_s",
    "tokens_per_s",
    "allocation_bps",
    "link_rate_bps",
    "ts",
)


@dataclass
class Ingest:
    """The ingest loop's state: a Redis client, per-job downsampling clocks, the fan-out."""

    client: redis.Redis
    sample_interval_s: float = field(default_factory=lambda: settings.SYNCLANE_SAMPLE_INTERVAL_S)
    fanout: Fanout = field(default_factory=shared_fanout)
    last_stored: dict[int, float] = field(default_factory=dict)
    last_summary: dict[int, float] = field(default_factory=dict)
    enhanced: dict[int, bool] = field(default_factory=dict)

    @classmethod
    def from_settings(cls) -> Ingest:
        return cls(client=redis.Redis.from_url(settings.REDIS_URL, decode_responses=True))

    def step(self, *, block_ms: int = 500) -> int:
        """Read, store and forward one batch; return the number of messages handled.

        Steps: 1. one XREAD over every stream that should be live (``streaming_job_ids``); 2. one query for their jobs; 3. the
        batch (alarms aside) goes to the fan-out, which sends it on its own loop; 4. one
        transaction stores every job's samples, link states, alarms and last step (a
        commit per job cost a disk sync each and let latency pile up at 20 runs); 5. the
        alarms follow to the fan-out; 6. cursors advance; 7. drained streams of finished
        jobs are retired.
        """
        job_ids = self.streaming_job_ids()
        if not job_ids:
            return 0
        # The client decodes responses (decode_responses=True): str keys and values.
        cursors = cast("dict[str, str]", self.client.hgetall(CURSORS_KEY))
        streams: dict[Any, Any] = {
            protocol.telemetry_stream(j): cursors.get(str(j), "0-0") for j in job_ids
        }
        batches = cast(
            "list[tuple[str, list[tuple[str, dict[str, str]]]]]",
            self.client.xread(streams, count=BATCH, block=block_ms) or [],
        )
        read = {int(stream.rsplit(":", 1)[1]): entries for stream, entries in batches}
        jobs = {
            job.pk: job
            for job in Job.objects.filter(pk__in=read)
            .select_related("tenant")
            .only("pk", "tenant_id", "tenant__slug", "last_step")
        }
        decoded = {
            job_id: [m for m in (_decode(fields) for _, fields in entries) if m is not None]
            for job_id, entries in read.items()
            if job_id in jobs
        }
        for messages in decoded.values():
            for kind, data in messages:
                if kind == protocol.MSG_LINK:  # pages draw cells; add them before anything is sent
                    data["cells"] = [_cell_json(c) for c in link_cells(data)]
        # Live first: the pages should not wait for the disk. Alarms go after the write,
        # because they carry the stored alarm's id (a page acknowledges by it).
        live: list[Outgoing] = []
        for job_id, messages in decoded.items():
            self._route(jobs[job_id], [m for m in messages if m[0] != protocol.MSG_ALARM], live)
        self.fanout.send(live)
        with transaction.atomic():
            for job_id, messages in decoded.items():
                self._store(jobs[job_id], messages)
        alarms: list[Outgoing] = []
        for job_id, messages in decoded.items():
            self._route(jobs[job_id], [m for m in messages if m[0] == protocol.MSG_ALARM], alarms)
        self.fanout.send(alarms)
        if read:
            self.client.hset(CURSORS_KEY, mapping={str(j): e[-1][0] for j, e in read.items()})
        self._retire_finished(set(job_ids) - set(read))
        return sum(len(entries) for entries in read.values())

    def streaming_job_ids(self) -> list[int]:
        """Return the jobs whose streams to read: running or restarting, and the active set."""
        from_db = Job.objects.filter(status__in=STREAMING).values_list("pk", flat=True)
        registered = self.client.smembers(protocol.ACTIVE_STREAMS_KEY)
        return sorted({*from_db, *(int(j) for j in registered)})

    def flush(self) -> None:
        """Wait until everything read so far has been handed to the channel layer."""
        self.fanout.flush()

    def _store(self, job: Job, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """Write what a batch of one job's messages keeps (inside the caller's transaction)."""
        samples, alarms, links, last_step = [], [], {}, job.last_step
        for kind, data in messages:
            if kind == protocol.MSG_METRICS:
                step = int(data.get("step", 0))
                last_step = max(last_step or 0, step)
                if self._keep(job.pk, data):
                    samples.append(
                        MetricSample(job=job, step=step, reported_at=_when(data), data=data)
                    )
            elif kind == protocol.MSG_ALARM:
                alarms.append(data)
            elif kind == protocol.MSG_LINK:
                for cell in link_cells(data):  # the newest measurement of a pair wins
                    links[(cell.src, cell.dst)] = _link_row(job, cell, _when(data))
        MetricSample.objects.bulk_create(samples)
        _upsert_links(list(links.values()))
        for data in alarms:
            alarm = record_alarm(job, data)
            if alarm is not None:
                data["alarm_id"] = alarm.pk  # lets a page acknowledge it
        # The step is written with the samples (as often as they are kept): one UPDATE per
        # message cost more than the rest of the ingest; pages get steps live anyway.
        if samples and last_step != job.last_step:
            Job.objects.filter(pk=job.pk).update(last_step=last_step)

    def _route(
        self, job: Job, messages: list[tuple[str, dict[str, Any]]], out: list[Outgoing]
    ) -> None:
        """Everything to the job's group; alarms and a throttled summary to tenant and cluster."""
        group, slug = job_group(job.pk), job.tenant.slug
        wide = (tenant_group(job.tenant_id), CLUSTER_GROUP)
        latest: dict[str, Any] | None = None
        for kind, data in messages:
            payload = {"type": kind, "job": job.pk, "tenant": slug, "data": data}
            out.append((group, payload))
            if kind == protocol.MSG_ALARM:
                out.extend((g, payload) for g in wide)
            elif kind == protocol.MSG_METRICS:
                latest = data
        now = time.monotonic()
        if (
            latest is not None
            and now - self.last_summary.get(job.pk, float("-inf")) >= SUMMARY_INTERVAL_S
        ):
            self.last_summary[job.pk] = now
            summary = {k: latest[k] for k in SUMMARY_FIELDS if k in latest}
            payload = {
                "type": "metrics",
                "job": job.pk,
                "tenant": slug,
                "summary": True,
                "data": summary,
            }
            out.extend((g, payload) for g in wide)

    def _keep(self, job_id: int, data: dict[str, Any]) -> bool:
        """Downsample: keep one sample per interval, and every evaluation or final step.

        Steps where sync enhancement switches on or off are kept too, so the drift
        chart's shaded periods start and end where they did.
        """
        ts = float(data.get("ts", 0.0))
        enhanced = bool(data.get("sync_enhanced"))
        switched = enhanced != self.enhanced.get(job_id, False)
        self.enhanced[job_id] = enhanced
        if "val_loss" in data or data.get("final") or switched:
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
        # A grace period after the end: the run's last messages (and any late reporter)
        # are still read instead of being deleted with the stream.
        settled = Q(finished_at__isnull=True) | Q(finished_at__lt=timezone.now() - RETIRE_AFTER)
        finished = Job.objects.filter(settled, pk__in=idle, status__in=TERMINAL)
        for job_id in finished.values_list("pk", flat=True):
            self.client.srem(protocol.ACTIVE_STREAMS_KEY, str(job_id))
            self.client.delete(protocol.telemetry_stream(job_id))
            self.client.hdel(CURSORS_KEY, str(job_id))
            self.last_stored.pop(job_id, None)
            self.last_summary.pop(job_id, None)
            self.enhanced.pop(job_id, None)


def _link_row(job: Job, cell: LinkCell, when: dt.datetime) -> LinkState:
    return LinkState(
        job=job,
        src=cell.src,
        dst=cell.dst,
        bandwidth_bps=cell.bandwidth_bps,
        latency_s=cell.latency_s,
        jitter_s=cell.jitter_s,
        state=cell.state,
        reissued=cell.reissued,
        step=cell.step,
        measured_at=when,
    )


def _upsert_links(rows: list[LinkState]) -> None:
    if rows:
        LinkState.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["job", "src", "dst"],
            update_fields=[
                "bandwidth_bps",
                "latency_s",
                "jitter_s",
                "state",
                "reissued",
                "step",
                "measured_at",
            ],
        )


def _cell_json(cell: LinkCell) -> dict[str, Any]:
    """A cell as the page draws it (Mbit/s and milliseconds)."""
    m = link_matrix([cell], 0)
    return {
        "src": cell.src,
        "dst": cell.dst,
        "bandwidth_mbps": m["bandwidth_mbps"][cell.src][cell.dst],
        "latency_ms": m["latency_ms"][cell.src][cell.dst],
        "jitter_ms": m["jitter_ms"][cell.src][cell.dst],
        "state": cell.state,
        "reissued": cell.reissued,
    }


def record_alarm(job: Job, data: dict[str, Any]) -> Alarm | None:
    """Open an alarm, or clear the open one of the same kind (and rank); return it."""
    kind = str(data.get("kind", ""))
    rank = data.get("rank")
    when = _when(data)
    if data.get("state") == "cleared":
        alarm = Alarm.objects.filter(job=job, kind=kind, rank=rank, cleared_at__isnull=True).first()
        if alarm is not None:
            alarm.cleared_at = when
            alarm.cleared_step = _opt_step(data.get("step"))
            alarm.save(update_fields=["cleared_at", "cleared_step"])
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


def _opt_step(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value >= 0 else None


def _when(data: dict[str, Any]) -> dt.datetime:
    ts = data.get("ts")
    if isinstance(ts, int | float):
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    return dt.datetime.now(tz=dt.UTC)
