"""Replay a trace against the scheduler on a simulated clock and print what happened.

    python -m controlplane.scheduling.simulate controlplane/scheduling/traces/example.json
    python -m controlplane.scheduling.simulate TRACE.json --bandwidth equal --json

``--bandwidth`` picks who sets the allocations: ``priority`` (the scheduler, the default),
``equal`` (equal shares of the fabric, each up to its ceiling) or ``fcfs`` (no allocation: a
shared link served first come first served, each job taking up to its ceiling in start order).
Admission and preemption are the scheduler's in all three.

Trace format (one JSON object; bandwidth in Mbit/s, times in seconds):

    {
      "cluster": {"slots": 48, "fabric_mbps": 10000},
      "tick_s": 30,                      # optional: re-allocate at least this often (urgency)
      "fabric_changes": [                # optional: link changes, e.g. a degraded link
        {"at": 1800, "fabric_mbps": 6000}, {"at": 2400, "fabric_mbps": 10000}],
      "checkpoint_s": 60,                # optional: a preempted job loses work since its last
                                         #   checkpoint, taken every this many work-seconds
      "tenants": [
        {"name": "vision", "nominal_slots": 16, "nominal_mbps": 4000,
         "max_running_jobs": 6,          # optional, default unlimited
         "weight": 1,                    # optional, default 1
         "cohort": "research",           # optional
         "borrowing_limit_slots": 8, "lending_limit_slots": null,    # optional, null = no limit
         "borrowing_limit_mbps": null, "lending_limit_mbps": null,   # optional
         "queue_policy": "BestEffortFIFO"}                            # or "StrictFIFO"
      ],
      "jobs": [
        {"id": "v1", "tenant": "vision", "arrival": 0, "slots": 4,
         "priority": "high",             # a class name or a number
         "floor_mbps": 200,              # optional, default 0
         "ceiling_mbps": 2000,           # optional; also the bandwidth at which the job runs at
                                         #   full speed (default: the fabric)
         "deadline": 900,                # optional: seconds after arrival
         "duration": 600,                # seconds of work at full speed
         "comm_fraction": 0.5}           # optional: share of a step spent communicating at full
                                         #   speed (default 0.5); with bandwidth b < full speed
                                         #   a step takes (1 - f) + f * full / b of its time
      ]
    }

It prints the simulated wall time, admissions per second (simulated), time to first admission
p50/p90 per priority class, slot and bandwidth utilisation, job completion time (mean, p95,
p99), deadline misses, preemptions, and the real time the scheduler spent per job and per
decision.
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

from .bandwidth import water_fill
from .scheduler import schedule
from .types import (
    Cluster,
    Decision,
    JobRequest,
    PriorityClass,
    QueuePolicy,
    Snapshot,
    TenantQuota,
)

MBIT = 1e6
MODES = ("priority", "equal", "fcfs")
DONE = 1e-9  # work-seconds left that count as finished


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


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    cluster: Cluster
    tenants: tuple[TenantQuota, ...]
    jobs: tuple[TraceJob, ...]
    tick_s: float = 30.0
    checkpoint_s: float = 60.0
    fabric_changes: tuple[tuple[float, float], ...] = ()  # (time, fabric bit/s), by time

    def __post_init__(self) -> None:
        if self.tick_s <= 0 or self.checkpoint_s <= 0:
            raise ValueError("tick_s and checkpoint_s must be > 0")
        for job in self.jobs:
            if job.duration <= 0 or not 0 <= job.comm_fraction <= 1:
                raise ValueError(f"job {job.id}: duration must be > 0, comm_fraction in [0, 1]")


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
        queue_policy=QueuePolicy(raw.get("queue_policy", QueuePolicy.BEST_EFFORT_FIFO)),
    )


def _job(raw: Mapping[str, Any]) -> TraceJob:
    arrival = float(raw["arrival"])
    deadline = raw.get("deadline")
    return TraceJob(
        id=str(raw["id"]),
        tenant=raw["tenant"],
        arrival=arrival,
        slots=int(raw["slots"]),
        priority=_priority(raw.get("priority", "normal")),
        floor_bps=float(raw.get("floor_mbps", 0.0)) * MBIT,
        ceiling_bps=_mbps(raw.get("ceiling_mbps")),
        deadline=None if deadline is None else arrival + float(deadline),
        duration=float(raw["duration"]),
        comm_fraction=float(raw.get("comm_fraction", 0.5)),
    )


def load(raw: Mapping[str, Any]) -> Trace:
    """Build a :class:`Trace` from the JSON object described in the module docstring."""
    cluster = raw["cluster"]
    return Trace(
        cluster=Cluster(
            slots=int(cluster["slots"]), fabric_bps=float(cluster["fabric_mbps"]) * MBIT
        ),
        tenants=tuple(_tenant(t) for t in raw["tenants"]),
        jobs=tuple(sorted((_job(j) for j in raw["jobs"]), key=lambda j: (j.arrival, j.id))),
        tick_s=float(raw.get("tick_s", 30.0)),
        checkpoint_s=float(raw.get("checkpoint_s", 60.0)),
        fabric_changes=tuple(
            sorted(
                (float(c["at"]), float(c["fabric_mbps"]) * MBIT)
                for c in raw.get("fabric_changes", ())
            )
        ),
    )


# --- the simulated cluster ------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _State:
    """One job's progress in the simulation."""

    job: TraceJob
    done: float = 0.0  # work-seconds completed
    bps: float = 0.0
    started_at: float = 0.0
    first_admitted: float | None = None
    finished: float | None = None

    def full_speed_bps(self, fabric: float) -> float:
        return self.job.ceiling_bps if self.job.ceiling_bps is not None else fabric

    def rate(self, fabric: float) -> float:
        """Work-seconds per second at the current allocation."""
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
    time_to_admission: dict[str, dict[str, float]]
    misses_by_class: dict[str, int]
    decisions: int
    decision_real_s: float
    decision_max_ms: float
    decision_us_per_job: float = field(init=False)
    admissions_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.decision_us_per_job = self.decision_real_s / max(1, self.jobs) * 1e6
        self.admissions_per_s = self.admissions / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Simulation:
    """Event loop: arrivals, completions and periodic ticks; one decision per event time."""

    def __init__(self, trace: Trace, bandwidth: str = "priority") -> None:
        if bandwidth not in MODES:
            raise ValueError(f"bandwidth must be one of {MODES}, got {bandwidth}")
        self.trace = trace
        self.mode = bandwidth
        self.cluster = trace.cluster
        self.fabric = trace.cluster.fabric_bps  # now; changes with fabric_changes
        self.full = trace.cluster.fabric_bps  # full speed of a job without a ceiling
        self.changes = list(reversed(trace.fabric_changes))  # pop() gives the next change
        self.fabric_seconds = 0.0
        self.states = {j.id: _State(job=j) for j in trace.jobs}
        self.arrivals = list(reversed(trace.jobs))  # pop() gives the next arrival
        self.pending: dict[str, _State] = {}
        self.running: dict[str, _State] = {}
        self.now = 0.0
        self.admissions = 0
        self.preemptions = 0
        self.slot_seconds = 0.0
        self.bit_seconds = 0.0
        self.decision_times: list[float] = []

    def run(self) -> Metrics:
        """Replay the whole trace and return its metrics."""
        while self.arrivals or self.running:
            if not (
                self.arrivals
                or self.changes
                or any(s.rate(self.full) for s in self.running.values())
            ):
                break  # stalled: the running jobs get no bandwidth and nothing else will happen
            self._advance(self._next_event())
            self._change_fabric()
            self._arrive()
            self._decide()
        return self._metrics()

    # 1. find the next event: an arrival, a completion, or a tick while jobs run
    def _next_event(self) -> float:
        candidates = [self.now + self.trace.tick_s] if self.running else []
        if self.arrivals:
            candidates.append(self.arrivals[-1].arrival)
        if self.changes:
            candidates.append(self.changes[-1][0])
        for s in self.running.values():
            rate = s.rate(self.full)
            if rate > 0:
                candidates.append(self.now + s.left() / rate)
        return max(self.now, min(candidates))

    # 2. move every running job forward to that time, and finish those that are done
    def _advance(self, until: float) -> None:
        dt = until - self.now
        self.slot_seconds += dt * sum(s.job.slots for s in self.running.values())
        self.bit_seconds += dt * sum(s.bps for s in self.running.values())
        self.fabric_seconds += dt * self.fabric
        for s in self.running.values():
            s.done += dt * s.rate(self.full)
        self.now = until
        for job_id in [
            i for i, s in self.running.items() if s.left() <= DONE * max(1, s.job.duration)
        ]:
            self.running.pop(job_id).finished = self.now

    # 3. apply the link changes due now, then queue the jobs that arrive now
    def _change_fabric(self) -> None:
        while self.changes and self.changes[-1][0] <= self.now:
            self.fabric = self.changes.pop()[1]
            self.cluster = Cluster(slots=self.cluster.slots, fabric_bps=self.fabric)

    def _arrive(self) -> None:
        while self.arrivals and self.arrivals[-1].arrival <= self.now:
            job = self.arrivals.pop()
            self.pending[job.id] = self.states[job.id]

    # 4. ask the scheduler, then apply its decision
    def _decide(self) -> None:
        snapshot = Snapshot(
            cluster=self.cluster,
            tenants=self.trace.tenants,
            pending=[self._request(s) for s in self.pending.values()],
            running=[self._request(s).started(s.started_at) for s in self.running.values()],
        )
        began = time.perf_counter()
        decision = schedule(snapshot, self.now)
        self.decision_times.append(time.perf_counter() - began)
        self._apply(decision)

    def _request(self, s: _State) -> JobRequest:
        job = s.job
        rate = s.rate(self.full) if s.job.id in self.running else 0.0
        return JobRequest(
            id=job.id,
            tenant=job.tenant,
            slots=job.slots,
            submit_time=job.arrival,
            priority=job.priority,
            bandwidth_floor_bps=job.floor_bps,
            bandwidth_ceiling_bps=job.ceiling_bps,
            deadline=job.deadline,
            remaining_steps=s.left(),
            steps_per_second=rate or None,
        )

    def _apply(self, decision: Decision) -> None:
        for p in decision.preemptions:
            s = self.running.pop(p.job_id)
            s.done = math.floor(s.done / self.trace.checkpoint_s) * self.trace.checkpoint_s
            s.bps = 0.0
            self.pending[p.job_id] = s
            self.preemptions += 1
        for a in decision.admissions:
            s = self.pending.pop(a.job_id)
            s.started_at = self.now
            if s.first_admitted is None:
                s.first_admitted = self.now
            self.running[a.job_id] = s
            self.admissions += 1
        self._allocate(decision)

    def _allocate(self, decision: Decision) -> None:
        states = sorted(self.running.values(), key=lambda s: (s.started_at, s.job.id))
        if self.mode == "priority":
            for s in states:
                s.bps = decision.allocations[s.job.id].bps
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
            misses_by_class=misses,
            decisions=len(self.decision_times),
            decision_real_s=sum(self.decision_times),
            decision_max_ms=max(self.decision_times, default=0.0) * 1e3,
        )


def percentile(values: Sequence[float], pct: float) -> float:
    """Return the nearest-rank percentile of sorted ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(pct / 100 * len(values)))
    return values[rank - 1]


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


def run(trace: Trace, bandwidth: str = "priority") -> Metrics:
    """Replay ``trace`` with the given bandwidth mode and return its metrics."""
    return Simulation(trace, bandwidth).run()


# --- the command ----------------------------------------------------------------------------


def report(m: Metrics) -> str:
    """Return the metrics as the lines the command prints."""
    lines = [
        f"bandwidth allocation   {m.mode}",
        f"jobs                   {m.jobs} ({m.completed} completed)",
        f"simulated wall time    {m.wall_s:.0f} s",
        f"admissions             {m.admissions} ({m.admissions_per_s:.4f}/s simulated)",
        f"preemptions            {m.preemptions}",
        f"slot utilisation       {m.slot_utilisation:.1%}",
        f"bandwidth utilisation  {m.bandwidth_utilisation:.1%}",
        f"job completion time    mean {m.jct_mean_s:.0f} s, p95 {m.jct_p95_s:.0f} s, "
        f"p99 {m.jct_p99_s:.0f} s",
        f"deadline misses        {m.deadline_misses} of {m.deadline_jobs} "
        + " ".join(f"{k}={v}" for k, v in sorted(m.misses_by_class.items())),
        "time to admission      class      p50 s     p90 s     jobs",
    ]
    for label in [c.name.lower() for c in reversed(PriorityClass)]:
        t = m.time_to_admission.get(label)
        if t is not None:
            lines.append(f"{'':23}{label:<9}{t['p50']:>7.0f}{t['p90']:>10.0f}{t['n']:>9.0f}")
    per_decision = m.decision_real_s / max(1, m.decisions) * 1e3
    lines.append(
        f"decision time (real)   {m.decision_real_s * 1e3:.0f} ms in {m.decisions} decisions "
        f"(mean {per_decision:.2f} ms, max {m.decision_max_ms:.2f} ms), "
        f"{m.decision_us_per_job:.0f} us per job"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("trace", type=Path, help="trace JSON (format in the module docstring)")
    parser.add_argument("--bandwidth", choices=MODES, default="priority")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = parser.parse_args(argv)
    metrics = run(load(json.loads(args.trace.read_text())), args.bandwidth)
    print(json.dumps(metrics.as_dict(), indent=2) if args.json else report(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
