"""Replay a trace against the scheduler on a simulated clock and print what happened.

    python -m controlplane.scheduling.simulate controlplane/scheduling/traces/example.json
    python -m controlplane.scheduling.simulate TRACE.json --bandwidth equal --json
    python -m controlplane.scheduling.simulate TRACE.json --decision-latency-ms 23
    python -m controlplane.scheduling.simulate TRACE.json --admission-latency-ms 32

``--bandwidth`` picks who sets the allocations: ``priority`` (the scheduler, the default),
``equal`` (equal shares of the fabric, each up to its ceiling) or ``fcfs`` (no allocation: a
shared link served first come first served, each job taking up to its ceiling in start order).
Admission and preemption are the scheduler's in all three.

``--decision-latency-ms`` (or ``decision_latency`` in the trace) charges every decision that
much simulated time, and ``--admission-latency-ms`` (``admission_latency``) that much more for
each job it admits, as the real path (API, database, Celery, supervisor) takes time per pass
and per job it launches: the next decision cannot start before both have passed, and the k-th
job a decision admits starts its work k admission latencies after the decision's own. The real
path's cost is mostly per job (``tests/benchmarks/bench_admission.py`` measures it: one over its
admissions per second), so the admission latency is the one that makes a simulated run predict
the real one. Without them, decisions are free and instant.

The scheduler is kept between decisions (:class:`~.admission.Queues`): each arrival,
completion and eviction is told to it as it happens, so a decision looks only at what changed.

Trace format (one JSON object; bandwidth in Mbit/s; times in seconds, or in milliseconds with
``"time_unit": "ms"``; priorities are class names or numbers, kept as given):

    {
      "time_unit": "s",                  # optional: "s" (default) or "ms", for every time below
      "cluster": {"slots": 48, "fabric_mbps": 10000},
      "tick_s": 30,                      # optional: re-allocate at least this often (urgency)
      "fabric_changes": [                # optional: link changes, e.g. a degraded link
        {"at": 1800, "fabric_mbps": 6000}, {"at": 2400, "fabric_mbps": 10000}],
      "checkpoint_s": 60,                # optional: a preempted job loses the work done since
                                         #   its last checkpoint, taken every this many
                                         #   work-seconds after each admission
      "decision_latency": 0,             # optional: simulated time each decision takes
      "admission_latency": 0,            # optional: and each job it admits, on top
      "options": {                       # optional: see scheduling.types.Options
        "min_run_time": 0, "eviction_limit": 3, "backoff_base": 0, "backoff_max": 3600,
        "cohort_order": {"research": "Classical"}},                  # or "FairShare"
      "tenants": [
        {"name": "vision", "nominal_slots": 16, "nominal_mbps": 4000,
         "max_running_jobs": 6,          # optional, default unlimited
         "weight": 1,                    # optional, default 1
         "cohort": "research",           # optional
         "borrowing_limit_slots": 8, "lending_limit_slots": null,    # optional, null = no limit
         "borrowing_limit_mbps": null, "lending_limit_mbps": null,   # optional
         "queue_policy": "BestEffortFIFO",   # optional, default StrictFIFO
         "preemption": "LowerPriority"}     # optional, or "Never", "LowerOrNewerEqualPriority"
      ],
      "jobs": [
        {"id": "v1", "tenant": "vision", "arrival": 0, "slots": 4,
         "priority": "high",             # a class name or a number
         "floor_mbps": 200,              # optional, default 0
         "ceiling_mbps": 2000,           # optional; also the bandwidth at which the job runs at
                                         #   full speed (default: the fabric)
         "deadline": 900,                # optional: time after arrival
         "duration": 600,                # work at full speed
         "checkpoint": 30,               # optional: this job's checkpoint interval
         "comm_fraction": 0.5}           # optional: share of a step spent communicating at full
                                         #   speed (default 0.5); with bandwidth b < full speed
                                         #   a step takes (1 - f) + f * full / b of its time
      ]
    }

It prints the simulated wall time, admissions per second (simulated), time to first and to last
admission (mean and percentiles, overall and per priority), slot and bandwidth utilisation, job
completion time (mean, p95, p99), deadline misses, preemptions, evictions per job, work lost,
and the CPU time the scheduler spent per job and per decision.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .admission import Outcome, Queues
from .bandwidth import allocate, water_fill
from .types import (
    DEFAULT_QUEUE_POLICY,
    AdmissionOrder,
    Cluster,
    JobRequest,
    Options,
    PreemptionPolicy,
    PriorityClass,
    QueuePolicy,
    RunningJob,
    TenantQuota,
)

MBIT = 1e6
MODES = ("priority", "equal", "fcfs")
DONE = 1e-9  # work-seconds left that count as finished
UNITS = {"s": 1.0, "ms": 1e-3}


# --- the trace ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceJob:
    id: str
    tenant: str
    arrival: float
    slots: int
    priority: int
    floor_bps: float
    ceiling_bps: float | None
    deadline: float | None  # absolute simulated time
    duration: float
    comm_fraction: float
    checkpoint_s: float | None = None  # None: the trace's checkpoint_s


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    cluster: Cluster
    tenants: tuple[TenantQuota, ...]
    jobs: tuple[TraceJob, ...]
    tick_s: float = 30.0
    checkpoint_s: float = 60.0
    fabric_changes: tuple[tuple[float, float], ...] = ()  # (time, fabric bit/s), by time
    options: Options = field(default_factory=Options)
    decision_latency_s: float = 0.0
    admission_latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.tick_s <= 0 or self.checkpoint_s <= 0:
            raise ValueError("tick_s and checkpoint_s must be > 0")
        if self.decision_latency_s < 0 or self.admission_latency_s < 0:
            raise ValueError("decision_latency and admission_latency must be >= 0")
        for job in self.jobs:
            if job.duration <= 0 or not 0 <= job.comm_fraction <= 1:
                raise ValueError(f"job {job.id}: duration must be > 0, comm_fraction in [0, 1]")
            if job.checkpoint_s is not None and job.checkpoint_s <= 0:
                raise ValueError(f"job {job.id}: checkpoint must be > 0")

    def checkpoint_of(self, job: TraceJob) -> float:
        return self.checkpoint_s if job.checkpoint_s is None else job.checkpoint_s


def _mbps(value: Any) -> float | None:
    return None if value is None else float(value) * MBIT


def _priority(value: Any) -> int:
    if isinstance(value, str):
        return PriorityClass[value.upper()].value
    return int(value)


def _tenant(raw: Mapping[str, Any]) -> TenantQuota:
    return TenantQuota(
        name=raw["name"],
        nominal_slots=int(raw["nominal_slots"]),
        nominal_bandwidth_bps=float(raw["nominal_mbps"]) * MBIT,
        max_running_jobs=raw.get("max_running_jobs"),
        weight=float(raw.get("weight", 1.0)),
        cohort=raw.get("cohort"),
        borrowing_limit_slots=raw.get("borrowing_limit_slots"),
        lending_limit_slots=raw.get("lending_limit_slots"),
        borrowing_limit_bps=_mbps(raw.get("borrowing_limit_mbps")),
        lending_limit_bps=_mbps(raw.get("lending_limit_mbps")),
        queue_policy=QueuePolicy(raw.get("queue_policy", DEFAULT_QUEUE_POLICY)),
        preemption=PreemptionPolicy(raw.get("preemption", PreemptionPolicy.LOWER_PRIORITY)),
    )


def _job(raw: Mapping[str, Any], unit: float) -> TraceJob:
    arrival = float(raw["arrival"]) * unit
    deadline = raw.get("deadline")
    checkpoint = raw.get("checkpoint")
    return TraceJob(
        id=str(raw["id"]),
        tenant=raw["tenant"],
        arrival=arrival,
        slots=int(raw["slots"]),
        priority=_priority(raw.get("priority", "normal")),
        floor_bps=float(raw.get("floor_mbps", 0.0)) * MBIT,
        ceiling_bps=_mbps(raw.get("ceiling_mbps")),
        deadline=None if deadline is None else arrival + float(deadline) * unit,
        duration=float(raw["duration"]) * unit,
        comm_fraction=float(raw.get("comm_fraction", 0.5)),
        checkpoint_s=None if checkpoint is None else float(checkpoint) * unit,
    )


def _options(raw: Mapping[str, Any], unit: float) -> Options:
    return Options(
        min_run_time_s=float(raw.get("min_run_time", 0.0)) * unit,
        eviction_limit=int(raw.get("eviction_limit", 3)),
        backoff_base_s=float(raw.get("backoff_base", 0.0)) * unit,
        backoff_max_s=float(raw.get("backoff_max", 3600.0 / unit)) * unit,
        cohort_order={c: AdmissionOrder(o) for c, o in raw.get("cohort_order", {}).items()},
    )


def load(raw: Mapping[str, Any]) -> Trace:
    """Build a :class:`Trace` from the JSON object described in the module docstring."""
    unit_name = raw.get("time_unit", "s")
    if unit_name not in UNITS:
        raise ValueError(f"time_unit must be one of {sorted(UNITS)}, got {unit_name!r}")
    unit = UNITS[unit_name]
    cluster = raw["cluster"]
    return Trace(
        cluster=Cluster(
            slots=int(cluster["slots"]), fabric_bps=float(cluster["fabric_mbps"]) * MBIT
        ),
        tenants=tuple(_tenant(t) for t in raw["tenants"]),
        jobs=tuple(sorted((_job(j, unit) for j in raw["jobs"]), key=lambda j: (j.arrival, j.id))),
        tick_s=float(raw.get("tick_s", 30.0 / unit)) * unit,
        checkpoint_s=float(raw.get("checkpoint_s", 60.0 / unit)) * unit,
        fabric_changes=tuple(
            sorted(
                (float(c["at"]) * unit, float(c["fabric_mbps"]) * MBIT)
                for c in raw.get("fabric_changes", ())
            )
        ),
        options=_options(raw.get("options", {}), unit),
        decision_latency_s=float(raw.get("decision_latency", 0.0)) * unit,
        admission_latency_s=float(raw.get("admission_latency", 0.0)) * unit,
    )


# --- the simulated cluster ------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _State:
    """One job's progress in the simulation."""

    job: TraceJob
    done: float = 0.0  # work-seconds completed
    done_at_admission: float = 0.0  # checkpoints are taken every interval after admission
    bps: float = 0.0
    started_at: float = 0.0
    ready_at: float = 0.0  # the admitting decision's latency has passed: work starts
    first_admitted: float | None = None
    last_admitted: float | None = None
    finished: float | None = None
    evictions: int = 0
    work_lost: float = 0.0

    def full_speed_bps(self, fabric: float) -> float:
        return self.job.ceiling_bps if self.job.ceiling_bps is not None else fabric

    def rate(self, fabric: float, now: float) -> float:
        """Work-seconds per second at the current allocation."""
        if now < self.ready_at:
            return 0.0
        full = self.full_speed_bps(fabric)
        if self.job.comm_fraction <= 0 or full <= 0:
            return 1.0
        if self.bps <= 0:
            return 0.0
        f = self.job.comm_fraction
        return 1.0 / ((1.0 - f) + f * full / min(self.bps, full))

    def left(self) -> float:
        return max(0.0, self.job.duration - self.done)


@dataclass(kw_only=True, slots=True)
class Metrics:
    """What one replay measured; ``as_dict`` is what ``--json`` prints."""

    mode: str
    jobs: int
    completed: int
    wall_s: float
    admissions: int
    preemptions: int
    deadline_jobs: int
    deadline_misses: int
    slot_utilisation: float
    bandwidth_utilisation: float
    jct_mean_s: float
    jct_p95_s: float
    jct_p99_s: float
    time_to_admission: dict[str, dict[str, float]]  # first admission, by class label (s)
    time_to_first_admission_ms: dict[str, float]  # mean, p50, p90, p99 over all jobs
    time_to_last_admission_ms: dict[str, float]
    time_to_admission_by_priority_ms: dict[str, dict[str, float]]  # by priority as given
    evictions_per_job: dict[str, float]  # mean, max, and jobs evicted at least once
    work_lost_s: float  # work-seconds destroyed by evictions (since the last checkpoint)
    misses_by_class: dict[str, int]
    decisions: int
    decision_latency_s: float
    admission_latency_s: float
    decision_real_s: float  # CPU time of this process in the scheduler
    decision_max_ms: float
    decision_us_per_job: float = field(init=False)
    admissions_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.decision_us_per_job = self.decision_real_s / max(1, self.jobs) * 1e6
        self.admissions_per_s = self.admissions / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Simulation:
    """Event loop: arrivals, completions, back-off ends and periodic ticks; one decision per
    event time (or more at that time while a classical cohort still admits)."""

    def __init__(
        self,
        trace: Trace,
        bandwidth: str = "priority",
        decision_latency_s: float | None = None,
        admission_latency_s: float | None = None,
    ) -> None:
        if bandwidth not in MODES:
            raise ValueError(f"bandwidth must be one of {MODES}, got {bandwidth}")
        self.trace = trace
        self.mode = bandwidth
        self.latency = (
            trace.decision_latency_s if decision_latency_s is None else decision_latency_s
        )
        self.per_admission = (
            trace.admission_latency_s if admission_latency_s is None else admission_latency_s
        )
        if self.latency < 0 or self.per_admission < 0:
            raise ValueError("decision and admission latencies must be >= 0")
        self.cluster = trace.cluster
        self.fabric = trace.cluster.fabric_bps  # now; changes with fabric_changes
        self.full = trace.cluster.fabric_bps  # full speed of a job without a ceiling
        self.changes = list(reversed(trace.fabric_changes))  # pop() gives the next change
        self.fabric_seconds = 0.0
        self.states = {j.id: _State(job=j) for j in trace.jobs}
        self.arrivals = list(reversed(trace.jobs))  # pop() gives the next arrival
        self.queues = Queues(trace.cluster, trace.tenants, trace.options)
        self.running: dict[str, _State] = {}
        self.now = 0.0
        self.busy_until = -math.inf  # the last decision's latency ends then
        self.again = False  # the last decision left a classical queue with more to admit
        self.admissions = 0
        self.preemptions = 0
        self.slot_seconds = 0.0
        self.bit_seconds = 0.0
        self.decision_times: list[float] = []

    def run(self) -> Metrics:
        """Replay the whole trace and return its metrics."""
        while self.arrivals or self.running or self.again:
            if not (
                self.arrivals
                or self.changes
                or self.again
                or self.now < self.busy_until
                or any(s.rate(self.full, self.now) for s in self.running.values())
            ):
                break  # stalled: the running jobs get no bandwidth and nothing else will happen
            self._advance(self._next_event())
            self._change_fabric()
            self._arrive()
            if self.now >= self.busy_until:
                self._decide()
        return self._metrics()

    # 1. find the next event: an arrival, a completion, a back-off end, a tick while jobs run,
    #    the end of the last decision's latency, an admitted job's start; never before that
    #    end for a new decision
    def _next_event(self) -> float:
        candidates = [self.now + self.trace.tick_s] if self.running else []
        if self.arrivals:
            candidates.append(self.arrivals[-1].arrival)
        if self.changes:
            candidates.append(self.changes[-1][0])
        if self.again:  # the next decision, once this one's latency has passed
            candidates.append(max(self.now, self.busy_until))
        wakeup = self.queues.next_wakeup()
        if wakeup < math.inf:
            candidates.append(wakeup)
        if self.busy_until > self.now:
            candidates.append(self.busy_until)
        for s in self.running.values():
            rate = s.rate(self.full, self.now)
            if rate > 0:
                candidates.append(self.now + s.left() / rate)
            elif s.ready_at > self.now:  # admitted, its work starts then
                candidates.append(s.ready_at)
        return max(self.now, min(candidates))

    # 2. move every running job forward to that time, and finish those that are done
    def _advance(self, until: float) -> None:
        dt = until - self.now
        self.slot_seconds += dt * sum(s.job.slots for s in self.running.values())
        self.bit_seconds += dt * sum(s.bps for s in self.running.values())
        self.fabric_seconds += dt * self.fabric
        for s in self.running.values():
            s.done += dt * s.rate(self.full, self.now)
        self.now = until
        for job_id in [
            i for i, s in self.running.items() if s.left() <= DONE * max(1, s.job.duration)
        ]:
            self.running.pop(job_id).finished = self.now
            self.queues.release(job_id)

    # 3. apply the link changes due now, then queue the jobs that arrive now
    def _change_fabric(self) -> None:
        changed = False
        while self.changes and self.changes[-1][0] <= self.now:
            self.fabric = self.changes.pop()[1]
            self.cluster = Cluster(slots=self.cluster.slots, fabric_bps=self.fabric)
            changed = True
        if changed:
            self.queues.resize(self.cluster)

    def _arrive(self) -> None:
        while self.arrivals and self.arrivals[-1].arrival <= self.now:
            job = self.arrivals.pop()
            self.queues.submit(self._request(job), self.now)

    def _request(self, job: TraceJob) -> JobRequest:
        return JobRequest(
            id=job.id,
            tenant=job.tenant,
            slots=job.slots,
            submit_time=job.arrival,
            priority=job.priority,
            bandwidth_floor_bps=job.floor_bps,
            bandwidth_ceiling_bps=job.ceiling_bps,
            deadline=job.deadline,
            checkpoint_interval_s=self.trace.checkpoint_of(job),
        )

    # 4. ask the scheduler (it applies the decision to its own state), then apply it here
    def _decide(self) -> None:
        began = time.process_time()
        outcome = self.queues.decide(self.now)
        allocations = self._allocations()
        self.decision_times.append(time.process_time() - began)
        self.again = bool(outcome.admitted) and bool(self.queues.dirty)
        self.busy_until = self.now + self.latency + self.per_admission * len(outcome.admitted)
        self._apply(outcome)
        self._allocate(allocations)

    def _allocations(self) -> dict[str, float]:
        """The scheduler's bandwidth for every job holding slots now (mode ``priority``)."""
        if self.mode != "priority":
            return {}
        holding = [self._holding(job_id) for job_id in self.queues.running]
        decided = allocate(
            cluster=self.cluster, tenants=self.trace.tenants, running=holding, now=self.now
        )
        return {job_id: a.bps for job_id, a in decided.items()}

    def _holding(self, job_id: str) -> RunningJob:
        """A job holding slots, with its progress now (deadline urgency reads it)."""
        s = self.states[job_id]
        ran = job_id in self.running
        rate = s.rate(self.full, self.now) if ran else 0.0
        request = self._request(s.job)
        values = {f.name: getattr(request, f.name) for f in fields(JobRequest)}
        values.update(remaining_steps=s.left(), steps_per_second=rate or None)
        return RunningJob(**values, started_at=s.started_at if ran else self.now)

    def _apply(self, outcome: Outcome) -> None:
        for victim in outcome.victims:
            s = self.running.pop(victim.id)
            interval = self.trace.checkpoint_of(s.job)
            lost = (s.done - s.done_at_admission) % interval
            s.done -= lost
            s.work_lost += lost
            s.evictions += 1
            s.bps = 0.0
            self.preemptions += 1
        for k, job in enumerate(outcome.admitted, start=1):
            s = self.states[job.id]
            s.started_at = self.now
            s.ready_at = self.now + self.latency + k * self.per_admission
            s.done_at_admission = s.done
            if s.first_admitted is None:
                s.first_admitted = self.now
            s.last_admitted = self.now
            self.running[job.id] = s
            self.admissions += 1

    def _allocate(self, allocations: dict[str, float]) -> None:
        states = sorted(self.running.values(), key=lambda s: (s.started_at, s.job.id))
        if self.mode == "priority":
            for s in states:
                s.bps = allocations.get(s.job.id, 0.0)
            return
        caps = [min(s.full_speed_bps(self.full), self.fabric) for s in states]
        if self.mode == "equal":
            shares = water_fill([1.0] * len(states), [0.0] * len(states), caps, self.fabric)
        else:  # fcfs: in start order, each takes what it can use of what is left
            shares, left = [], self.fabric
            for cap in caps:
                shares.append(min(cap, left))
                left -= shares[-1]
        for s, bps in zip(states, shares, strict=True):
            s.bps = bps

    # 5. summarise
    def _metrics(self) -> Metrics:
        states = list(self.states.values())
        finished = [s for s in states if s.finished is not None]
        jct = sorted(s.finished - s.job.arrival for s in finished if s.finished is not None)
        wall = max((s.finished for s in finished if s.finished is not None), default=0.0)
        misses: dict[str, int] = {}
        with_deadline = [s for s in states if s.job.deadline is not None]
        for s in with_deadline:
            if s.finished is None or s.finished > (s.job.deadline or 0.0) + 1e-6:
                label = PriorityClass.label(s.job.priority)
                misses[label] = misses.get(label, 0) + 1
        capacity_s = wall * self.trace.cluster.slots
        first = [s.first_admitted - s.job.arrival for s in states if s.first_admitted is not None]
        last = [s.last_admitted - s.job.arrival for s in states if s.last_admitted is not None]
        evictions = [s.evictions for s in states]
        return Metrics(
            mode=self.mode,
            jobs=len(states),
            completed=len(finished),
            wall_s=wall,
            admissions=self.admissions,
            preemptions=self.preemptions,
            deadline_jobs=len(with_deadline),
            deadline_misses=sum(misses.values()),
            slot_utilisation=self.slot_seconds / capacity_s if capacity_s else 0.0,
            bandwidth_utilisation=self.bit_seconds / self.fabric_seconds
            if self.fabric_seconds
            else 0.0,
            jct_mean_s=sum(jct) / len(jct) if jct else 0.0,
            jct_p95_s=percentile(jct, 95),
            jct_p99_s=percentile(jct, 99),
            time_to_admission=_time_to_admission(states),
            time_to_first_admission_ms=summary_ms(first),
            time_to_last_admission_ms=summary_ms(last),
            time_to_admission_by_priority_ms=_by_priority(states),
            evictions_per_job={
                "mean": sum(evictions) / max(1, len(evictions)),
                "max": float(max(evictions, default=0)),
                "evicted_jobs": float(sum(1 for e in evictions if e)),
            },
            work_lost_s=sum(s.work_lost for s in states),
            misses_by_class=misses,
            decisions=len(self.decision_times),
            decision_latency_s=self.latency,
            admission_latency_s=self.per_admission,
            decision_real_s=sum(self.decision_times),
            decision_max_ms=max(self.decision_times, default=0.0) * 1e3,
        )


def percentile(values: Sequence[float], pct: float) -> float:
    """Return the nearest-rank percentile of sorted ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(pct / 100 * len(values)))
    return values[rank - 1]


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Mean, p50, p90 and p99 of ``seconds``, in milliseconds, and their count."""
    ordered = sorted(seconds)
    mean = sum(ordered) / len(ordered) if ordered else 0.0
    out = {"mean": mean * 1e3, "n": float(len(ordered))}
    for pct in (50, 90, 99):
        out[f"p{pct}"] = percentile(ordered, pct) * 1e3
    return out


def _by_priority(states: Sequence[_State]) -> dict[str, dict[str, float]]:
    waits: dict[int, list[float]] = {}
    for s in states:
        if s.first_admitted is not None:
            waits.setdefault(s.job.priority, []).append(s.first_admitted - s.job.arrival)
    return {str(p): summary_ms(w) for p, w in sorted(waits.items(), reverse=True)}


def _time_to_admission(states: Sequence[_State]) -> dict[str, dict[str, float]]:
    by_class: dict[str, list[float]] = {}
    for s in states:
        if s.first_admitted is not None:
            label = PriorityClass.label(s.job.priority)
            by_class.setdefault(label, []).append(s.first_admitted - s.job.arrival)
    out = {}
    for label, waits in by_class.items():
        waits.sort()
        out[label] = {"p50": percentile(waits, 50), "p90": percentile(waits, 90), "n": len(waits)}
    return out


def run(
    trace: Trace,
    bandwidth: str = "priority",
    decision_latency_s: float | None = None,
    admission_latency_s: float | None = None,
) -> Metrics:
    """Replay ``trace`` with the given bandwidth mode and return its metrics."""
    return Simulation(trace, bandwidth, decision_latency_s, admission_latency_s).run()


# --- the command ----------------------------------------------------------------------------


def report(m: Metrics) -> str:
    """Return the metrics as the lines the command prints."""
    first, last = m.time_to_first_admission_ms, m.time_to_last_admission_ms
    ev = m.evictions_per_job
    lines = [
        f"bandwidth allocation   {m.mode}",
        f"jobs                   {m.jobs} ({m.completed} completed)",
        f"simulated wall time    {m.wall_s:.3f} s",
        f"admissions             {m.admissions} ({m.admissions_per_s:.4f}/s simulated)",
        f"preemptions            {m.preemptions}; evictions per job mean {ev['mean']:.2f}, "
        f"max {ev['max']:.0f} ({ev['evicted_jobs']:.0f} jobs evicted)",
        f"work lost              {m.work_lost_s:.3f} s of work",
        f"slot utilisation       {m.slot_utilisation:.1%}",
        f"bandwidth utilisation  {m.bandwidth_utilisation:.1%}",
        f"job completion time    mean {m.jct_mean_s:.3f} s, p95 {m.jct_p95_s:.3f} s, "
        f"p99 {m.jct_p99_s:.3f} s",
        f"deadline misses        {m.deadline_misses} of {m.deadline_jobs} "
        + " ".join(f"{k}={v}" for k, v in sorted(m.misses_by_class.items())),
        "time to admission      to     priority     mean ms      p50 ms      p90 ms      p99 ms",
    ]
    rows = [("first", "all", first), ("last", "all", last)]
    rows += [("first", p, t) for p, t in m.time_to_admission_by_priority_ms.items()]
    for which, priority, t in rows:
        lines.append(
            f"{'':23}{which:<7}{priority:>8}"
            + "".join(f"{t[k]:>12.0f}" for k in ("mean", "p50", "p90", "p99"))
        )
    per_decision = m.decision_real_s / max(1, m.decisions) * 1e3
    lines.append(
        f"decision time (real)   {m.decision_real_s * 1e3:.0f} ms CPU in {m.decisions} decisions "
        f"(mean {per_decision:.2f} ms, max {m.decision_max_ms:.2f} ms), "
        f"{m.decision_us_per_job:.0f} us per job; simulated latency "
        f"{m.decision_latency_s * 1e3:.1f} ms per decision, "
        f"{m.admission_latency_s * 1e3:.1f} ms per admission"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("trace", type=Path, help="trace JSON (format in the module docstring)")
    parser.add_argument("--bandwidth", choices=MODES, default="priority")
    parser.add_argument(
        "--decision-latency-ms",
        type=float,
        default=None,
        help="simulated time each decision takes (default: the trace's, else 0)",
    )
    parser.add_argument(
        "--admission-latency-ms",
        type=float,
        default=None,
        help="simulated time each admitted job adds to its decision (default: the trace's, else 0)",
    )
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = parser.parse_args(argv)
    latency = None if args.decision_latency_ms is None else args.decision_latency_ms / 1e3
    per_job = None if args.admission_latency_ms is None else args.admission_latency_ms / 1e3
    metrics = run(load(json.loads(args.trace.read_text())), args.bandwidth, latency, per_job)
    print(json.dumps(metrics.as_dict(), indent=2) if args.json else report(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
