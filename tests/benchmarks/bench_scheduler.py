"""Benchmark of the scheduling core.

    python tests/benchmarks/bench_scheduler.py           # full run, writes bench-results/scheduler.json
    python tests/benchmarks/bench_scheduler.py --quick   # under a minute, fewer repeats and sizes
    python tests/benchmarks/bench_scheduler.py --docs    # full run, also rewrites its section
                                                         # of docs/benchmarks.md

Three parts:

1. **Decision cost**: one ``schedule()`` call (admission, preemption, reasons, allocation) at
   1k, 10k and 100k pending jobs across 10, 100 and 1000 tenants; the cluster is sized from the
   tenants' quotas (80% of their nominal slots) and 70% full of running jobs, so most pending
   jobs wait and many try preemption. Best of ``repeats`` runs. Target: <= 1 ms per pending job
   at 10k pending.
2. **Allocation cost**: ``allocate()`` for 1k running jobs of 100 tenants in 10 cohorts, with
   floors, ceilings and deadlines. Target: <= 10 ms.
3. **Bandwidth policy on a trace**: the same network-bound trace (deadlines on high and
   critical jobs) replayed by the simulator with allocation by priority (the scheduler), equal
   shares, and none (first come first served on the shared link): mean and tail job completion
   time and deadline misses.
4. **Kueue's baseline** (converted by ``kueue_trace.py``, 15,000 workloads in 30 queues of 5
   cohorts) replayed under several preemption settings and both admission orders: wall time,
   time to admission per class, evictions per job, work lost, beside Kueue's published means.
   With ``bench-results/admission.json`` present (``bench_admission.py`` runs first in
   ``make bench``), one more replay charges each admitted job the real path's measured cost
   per admission on PostgreSQL (one over its admissions per second), so the simulated run
   says how long our real stack would take over Kueue's baseline on this machine.
5. **Growth**: the baseline at 1x, 2x and 4x workloads: CPU of the whole replay and of the
   decisions alone (target: 4x workloads <= 4.5x CPU), and the slowest decision.
6. **Decisions at 50,000 pending jobs**: a :class:`Queues` holding 50,000 pending jobs of 100
   tenants, then 300 events (a job ends, a job arrives), one incremental decision after each:
   the slowest and mean decision (target: none over 50 ms).

Times are CPU time of this (single-threaded) process, best of several tries, so that other
processes on a shared machine inflate them less than wall-clock time would; still compare
ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import kueue_trace  # noqa: E402

from controlplane.scheduling import (  # noqa: E402
    Cluster,
    JobRequest,
    QueuePolicy,
    Queues,
    RunningJob,
    Snapshot,
    TenantQuota,
    allocate,
    schedule,
    simulate,
)

PRIORITIES = (100, 200, 300, 400)
GBIT = 1e9
OUT = ROOT / "bench-results" / "scheduler.json"
DOC = ROOT / "docs" / "benchmarks.md"
HEADING = "## Scheduler (bench_scheduler)"


def tenants_for(count: int, rng: random.Random) -> list[TenantQuota]:
    """``count`` tenants, two thirds of them in cohorts of ten, a mix of queue policies."""
    return [
        TenantQuota(
            name=f"t{i}",
            nominal_slots=rng.choice([8, 16, 32]),
            nominal_bandwidth_bps=rng.choice([1, 2, 5]) * GBIT,
            max_running_jobs=rng.choice([None, 8, 16]),
            weight=rng.choice([1.0, 1.0, 2.0]),
            cohort=f"c{i // 10}" if i % 3 else None,
            queue_policy=rng.choice(list(QueuePolicy)),
        )
        for i in range(count)
    ]


def world(pending: int, tenant_count: int, seed: int = 0) -> Snapshot:
    """A cluster 70% full and ``pending`` jobs spread over ``tenant_count`` tenants."""
    rng = random.Random(seed)
    tenants = tenants_for(tenant_count, rng)
    slots = int(0.8 * sum(t.nominal_slots for t in tenants))
    fabric = 0.8 * sum(t.nominal_bandwidth_bps for t in tenants)
    cluster = Cluster(slots=slots, fabric_bps=fabric)
    running: list[RunningJob] = []
    per_tenant = {t.name: 0 for t in tenants}
    used = 0
    while used < 0.7 * slots:
        quota = tenants[rng.randrange(tenant_count)]
        size = rng.choice([1, 2, 4, 8])
        if per_tenant[quota.name] + size > quota.nominal_slots:
            continue
        per_tenant[quota.name] += size
        used += size
        running.append(
            RunningJob(
                id=f"r{len(running)}",
                tenant=quota.name,
                slots=size,
                submit_time=0.0,
                started_at=rng.uniform(0, 100),
                priority=rng.choice(PRIORITIES),
                bandwidth_floor_bps=rng.choice([0.0, 0.0, 0.05 * GBIT]),
            )
        )
    jobs = [
        JobRequest(
            id=f"p{i}",
            tenant=f"t{rng.randrange(tenant_count)}",
            slots=rng.choice([1, 2, 4, 8]),
            submit_time=rng.uniform(0, 100),
            priority=rng.choice(PRIORITIES),
            bandwidth_floor_bps=rng.choice([0.0, 0.0, 0.1 * GBIT]),
            bandwidth_ceiling_bps=rng.choice([None, 2 * GBIT]),
            deadline=rng.choice([None, 500.0]),
            remaining_steps=1000.0,
            steps_per_second=2.0,
        )
        for i in range(pending)
    ]
    return Snapshot(cluster=cluster, tenants=tenants, pending=jobs, running=running)


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        began = time.process_time()
        fn()
        times.append(time.process_time() - began)
    return min(times)


def decision_cost(sizes: list[tuple[int, int]], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for pending, tenant_count in sizes:
        snap = world(pending, tenant_count)
        decision = schedule(snap, 100.0)
        # More tries for the cheap sizes: on a shared machine one slow try is common.
        tries = repeats if pending >= 100_000 else repeats * 2
        seconds = best_of(tries, partial(schedule, snap, 100.0))
        gone = {p.job_id for p in decision.preemptions}
        started = {a.job_id for a in decision.admissions}
        holding: list[JobRequest] = [r for r in snap.running if r.id not in gone]
        holding += [j for j in snap.pending if j.id in started]
        alloc = best_of(
            tries,
            partial(
                allocate, cluster=snap.cluster, tenants=snap.tenants, running=holding, now=100.0
            ),
        )
        rows.append(
            {
                "pending": pending,
                "tenants": tenant_count,
                "running": len(snap.running),
                "admitted": len(decision.admissions),
                "preempted": len(decision.preemptions),
                "decision_ms": seconds * 1e3,
                "allocation_ms": alloc * 1e3,
                "us_per_pending_job": seconds / pending * 1e6,
            }
        )
        print(
            f"  {pending:>7} pending {tenant_count:>5} tenants {len(snap.running):>5} running  "
            f"{seconds * 1e3:9.1f} ms  {seconds / pending * 1e6:6.1f} us/job",
            flush=True,
        )
    return rows


def allocation_cost(repeats: int) -> dict[str, Any]:
    rng = random.Random(1)
    tenants = tenants_for(100, rng)
    jobs = [
        RunningJob(
            id=f"r{i}",
            tenant=f"t{rng.randrange(100)}",
            slots=rng.choice([1, 2, 4, 8]),
            submit_time=0.0,
            started_at=rng.uniform(0, 100),
            priority=rng.choice(PRIORITIES),
            bandwidth_floor_bps=rng.choice([0.0, 0.0, 0.05 * GBIT]),
            bandwidth_ceiling_bps=rng.choice([None, 0.5 * GBIT, 2 * GBIT]),
            deadline=rng.choice([None, 300.0, 1000.0]),
            remaining_steps=rng.uniform(10, 5000),
            steps_per_second=rng.uniform(1, 20),
        )
        for i in range(1000)
    ]
    cluster = Cluster(slots=4000, fabric_bps=0.8 * sum(t.nominal_bandwidth_bps for t in tenants))
    seconds = best_of(
        repeats, lambda: allocate(cluster=cluster, tenants=tenants, running=jobs, now=100.0)
    )
    print(f"  allocation for 1000 running jobs, 100 tenants: {seconds * 1e3:.2f} ms", flush=True)
    return {"running": 1000, "tenants": 100, "allocation_ms": seconds * 1e3}


def network_bound_trace(jobs: int, seed: int = 3) -> dict[str, Any]:
    """A trace where the fabric is the bottleneck: slots are plenty, communication dominates,
    high and critical jobs carry deadlines of 1.3-2.5x their full-speed duration."""
    rng = random.Random(seed)
    tenants = [
        {"name": name, "nominal_slots": 24, "nominal_mbps": 2500, "cohort": "all"}
        for name in ("vision", "nlp", "speech", "rl")
    ]
    out, clock = [], 0.0
    for i in range(jobs):
        clock += rng.expovariate(1 / 250)  # about 90% of the fabric at full speed
        priority = rng.choices(["low", "normal", "high", "critical"], [3, 4, 2, 1])[0]
        duration = rng.choice([300, 600, 900, 1200])
        job: dict[str, Any] = {
            "id": f"j{i:03d}",
            "tenant": rng.choice(tenants)["name"],
            "arrival": round(clock),
            "slots": rng.choice([2, 4, 8]),
            "priority": priority,
            "duration": duration,
            "comm_fraction": rng.uniform(0.6, 0.9),
            "ceiling_mbps": rng.choice([2000, 3000, 4000]),
        }
        if priority in ("high", "critical"):
            job["deadline"] = round(duration * rng.uniform(1.3, 2.5))
            job["floor_mbps"] = 200
        out.append(job)
    return {
        "cluster": {"slots": 96, "fabric_mbps": 10000},
        "tick_s": 20,
        "tenants": tenants,
        "jobs": out,
    }


def policy_comparison(jobs: int) -> list[dict[str, Any]]:
    trace = simulate.load(network_bound_trace(jobs))
    rows = []
    for mode in simulate.MODES:
        m = simulate.run(trace, mode)
        urgent = m.misses_by_class.get("high", 0) + m.misses_by_class.get("critical", 0)
        rows.append(
            {
                "bandwidth": {"priority": "by priority", "equal": "equal shares"}.get(
                    mode, "none (FCFS link)"
                ),
                "jobs": m.jobs,
                "jct_mean_s": m.jct_mean_s,
                "jct_p95_s": m.jct_p95_s,
                "jct_p99_s": m.jct_p99_s,
                "deadline_misses": m.deadline_misses,
                "deadline_jobs": m.deadline_jobs,
                "misses_by_class": m.misses_by_class,
                "high_critical_misses": urgent,
                "bandwidth_utilisation": m.bandwidth_utilisation,
                "wall_s": m.wall_s,
                "decision_mean_ms": m.decision_real_s / max(1, m.decisions) * 1e3,
            }
        )
    return rows


# Preemption settings replayed on Kueue's baseline; times in ms (the trace's unit).
CLASSICAL = {f"cohort-{c}": "Classical" for c in range(kueue_trace.BASELINE["cohorts"])}
KUEUE_SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("fair share, no eviction limit", {"eviction_limit": 10**9}),
    ("fair share, k=3 (default)", {}),
    (
        "fair share, k=3, min run 500 ms, back-off 200 ms",
        {"min_run_time": 500, "backoff_base": 200, "backoff_max": 5000},
    ),
    ("classical, no eviction limit", {"eviction_limit": 10**9, "cohort_order": CLASSICAL}),
    ("classical, k=3", {"cohort_order": CLASSICAL}),
]
ADMISSION = ROOT / "bench-results" / "admission.json"


def kueue_row(label: str, options: dict[str, Any], per_admission_s: float | None = None) -> dict:
    """Replay the baseline once (each admission charged ``per_admission_s``); its row."""
    trace = simulate.load(kueue_trace.trace(1, options))
    began = time.process_time()
    m = simulate.run(trace, admission_latency_s=per_admission_s)
    cpu = time.process_time() - began
    by_priority = m.time_to_admission_by_priority_ms
    classes = {s["class"]: str(s["priority"]) for s in kueue_trace.BASELINE["workload_sets"]}
    row = {
        "setting": label,
        "options": options,
        "admission_latency_ms": m.admission_latency_s * 1e3,
        "wall_s": m.wall_s,
        "admissions_per_s": m.admissions_per_s,
        "avg_time_to_admission_ms": {c: by_priority[p]["mean"] for c, p in classes.items()},
        "time_to_first_admission_ms": m.time_to_first_admission_ms,
        "time_to_last_admission_ms": m.time_to_last_admission_ms,
        "preemptions": m.preemptions,
        "evictions_per_job": m.evictions_per_job,
        "work_lost_s": m.work_lost_s,
        "slot_utilisation": m.slot_utilisation,
        "cpu_s": cpu,
        "decision_cpu_s": m.decision_real_s,
        "decision_max_ms": m.decision_max_ms,
    }
    print(
        f"  {label:<52} wall {m.wall_s:7.1f} s  evictions max {m.evictions_per_job['max']:4.0f}"
        f"  lost {m.work_lost_s:7.1f} s  cpu {cpu:5.1f} s",
        flush=True,
    )
    return row


def measured_latency_s() -> float | None:
    """The real path's cost per admission on PostgreSQL, from bench_admission (None: not run)."""
    if not ADMISSION.exists():
        return None
    rows = json.loads(ADMISSION.read_text()).get("rows", [])
    rates = [r["admissions_per_s"] for r in rows if r["database"] == "postgresql"]
    return 1.0 / max(rates) if rates and max(rates) > 0 else None


def kueue_baseline() -> list[dict[str, Any]]:
    rows = [kueue_row(label, options) for label, options in KUEUE_SETTINGS]
    per_admission = measured_latency_s()
    if per_admission is not None:
        label = f"classical, k=3, real path's {per_admission * 1e3:.0f} ms per admission"
        rows.append(kueue_row(label, {"cohort_order": CLASSICAL}, per_admission))
    return rows


def growth(scales: list[int]) -> list[dict[str, Any]]:
    """CPU of the whole replay and of its decisions, at each multiple of the baseline."""
    rows = []
    for scale in scales:
        trace = simulate.load(kueue_trace.trace(scale))
        began = time.process_time()
        m = simulate.run(trace)
        cpu = time.process_time() - began
        rows.append(
            {
                "scale": scale,
                "jobs": m.jobs,
                "decisions": m.decisions,
                "cpu_s": cpu,
                "decision_cpu_s": m.decision_real_s,
                "decision_max_ms": m.decision_max_ms,
            }
        )
        print(
            f"  {scale}x ({m.jobs} jobs): replay {cpu:6.2f} s CPU, decisions "
            f"{m.decision_real_s:6.2f} s in {m.decisions}, slowest {m.decision_max_ms:.1f} ms",
            flush=True,
        )
    base = rows[0]
    for row in rows:
        row["cpu_ratio"] = row["cpu_s"] / base["cpu_s"]
        row["decision_cpu_ratio"] = row["decision_cpu_s"] / base["decision_cpu_s"]
    return rows


def loaded(snap: Snapshot) -> Queues:
    """A scheduler holding the snapshot's running jobs and queueing its pending ones."""
    queues = Queues(snap.cluster, snap.tenants)
    for job in snap.running:
        queues.hold(job)
    for job in snap.pending:
        queues.submit(job)
    return queues


def first_decision_by_backlog(sizes: list[int], repeats: int, seed: int = 5) -> list[dict]:
    """The first decision (every tenant looked at) on one cluster with backlogs of ``sizes``.

    The seed fixes the tenants and the running jobs, so only the backlog differs: what the
    decision costs against what it does (admissions, evictions) and what waits.
    """
    rows = []
    for pending in sizes:
        snap = world(pending, 100, seed)
        times, outcome = [], None
        for _ in range(repeats):
            queues = loaded(snap)
            began = time.process_time()
            outcome = queues.decide(100.0)
            times.append(time.process_time() - began)
        assert outcome is not None
        row = {
            "pending": pending,
            "tenants": len(snap.tenants),
            "running": len(snap.running),
            "admitted": len(outcome.admitted),
            "evicted": len(outcome.victims),
            "first_decision_ms": min(times) * 1e3,
        }
        rows.append(row)
        print(
            f"  {pending} pending: first decision {row['first_decision_ms']:.1f} ms "
            f"({row['admitted']} admitted, {row['evicted']} evicted)",
            flush=True,
        )
    return rows


def big_backlog(pending: int, events: int, seed: int = 5) -> dict[str, Any]:
    """Incremental decisions with ``pending`` jobs waiting: the slowest and the mean."""
    rng = random.Random(seed)
    snap = world(pending, 100, seed)
    queues = loaded(snap)
    began = time.process_time()
    queues.decide(100.0)
    first = time.process_time() - began
    times = []
    for i in range(events):
        now = 101.0 + i
        if queues.running:
            queues.release(rng.choice(sorted(queues.running)))
        tenant = snap.tenants[rng.randrange(len(snap.tenants))].name
        queues.submit(
            JobRequest(
                id=f"new{i}",
                tenant=tenant,
                slots=rng.choice([1, 2, 4, 8]),
                submit_time=now,
                priority=rng.choice(PRIORITIES),
            )
        )
        began = time.process_time()
        queues.decide(now)
        times.append(time.process_time() - began)
    row = {
        "pending": pending,
        "pending_after": queues.pending_count(),
        "tenants": len(snap.tenants),
        "events": events,
        "first_decision_ms": first * 1e3,
        "decision_max_ms": max(first, *times) * 1e3,
        # The first decision looks at every tenant; the later ones at what an event changed.
        "decision_max_after_first_ms": max(times) * 1e3,
        "decision_mean_ms": statistics.fmean(times) * 1e3,
    }
    print(
        f"  {pending} pending: first decision {first * 1e3:.1f} ms, then {events} decisions "
        f"max {row['decision_max_ms']:.2f} ms, mean {row['decision_mean_ms']:.3f} ms",
        flush=True,
    )
    return row


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| pending | tenants | running | admitted | preempted | decision (ms) "
        "| allocation alone (ms) | per pending job (us) | vs 1k pending |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {
        r["tenants"]: r["decision_ms"] for r in results["decision_cost"] if r["pending"] == 1000
    }
    for r in results["decision_cost"]:
        growth = r["decision_ms"] / base[r["tenants"]] if r["tenants"] in base else float("nan")
        lines.append(
            f"| {r['pending']} | {r['tenants']} | {r['running']} | {r['admitted']} "
            f"| {r['preempted']} | {r['decision_ms']:.1f} | {r['allocation_ms']:.1f} "
            f"| {r['us_per_pending_job']:.1f} "
            f"| {growth:.1f}x |"
        )
    a = results["allocation_cost"]
    lines += [
        "",
        f"Allocation for {a['running']} running jobs of {a['tenants']} tenants: "
        f"**{a['allocation_ms']:.2f} ms** (target <= 10 ms).",
        "",
        "| bandwidth allocation | mean JCT (s) | p95 JCT (s) | p99 JCT (s) | deadline misses "
        "| of which high/critical | bandwidth used |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["policy_comparison"]:
        lines.append(
            f"| {r['bandwidth']} | {r['jct_mean_s']:.0f} | {r['jct_p95_s']:.0f} "
            f"| {r['jct_p99_s']:.0f} | {r['deadline_misses']}/{r['deadline_jobs']} "
            f"| {r['high_critical_misses']} | {r['bandwidth_utilisation']:.0%} |"
        )
    return "\n".join(lines)


def kueue_markdown(results: dict[str, Any]) -> str:
    pub = kueue_trace.PUBLISHED
    tta = pub["avg_time_to_admission_ms"]
    lines = [
        "| run | wall (s) | admissions/s | mean wait large / medium / small (s) "
        "| evictions per job: mean, max | jobs evicted | work lost (s) | replay CPU (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| Kueue, published (mean of 5 runs) | {pub['wall_ms'] / 1e3:.0f} "
        f"| {15000 / (pub['wall_ms'] / 1e3):.1f} "
        f"| {tta['large'] / 1e3:.1f} / {tta['medium'] / 1e3:.1f} / {tta['small'] / 1e3:.1f} "
        "| n/a | n/a | n/a | n/a |",
    ]
    for r in results["kueue_baseline"]:
        w = r["avg_time_to_admission_ms"]
        ev = r["evictions_per_job"]
        lines.append(
            f"| {r['setting']} | {r['wall_s']:.1f} | {r['admissions_per_s']:.0f} "
            f"| {w['large'] / 1e3:.1f} / {w['medium'] / 1e3:.1f} / {w['small'] / 1e3:.1f} "
            f"| {ev['mean']:.2f}, {ev['max']:.0f} | {ev['evicted_jobs']:.0f} "
            f"| {r['work_lost_s']:.0f} | {r['cpu_s']:.1f} |"
        )
    lines += [
        "",
        "| workloads | jobs | decisions | replay CPU (s) | vs 1x | decisions CPU (s) | vs 1x "
        "| slowest decision (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["growth"]:
        lines.append(
            f"| {r['scale']}x | {r['jobs']} | {r['decisions']} | {r['cpu_s']:.2f} "
            f"| {r['cpu_ratio']:.2f}x | {r['decision_cpu_s']:.2f} | {r['decision_cpu_ratio']:.2f}x "
            f"| {r['decision_max_ms']:.1f} |"
        )
    b = results["big_backlog"]
    lines += [
        "",
        f"{b['pending']:,} pending jobs of {b['tenants']} tenants: first decision (every tenant "
        f"looked at) {b['first_decision_ms']:.1f} ms; then {b['events']} events (a job ends, "
        f"a job arrives) and a decision after each: slowest **{b['decision_max_ms']:.2f} ms** "
        f"(first included; {b['decision_max_after_first_ms']:.2f} ms after it), mean "
        f"{b['decision_mean_ms']:.3f} ms (target: none over 50 ms).",
        "",
        "| pending | running | first decision (ms, best of runs) | admitted | evicted |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results.get("first_decision_by_backlog", []):
        lines.append(
            f"| {r['pending']:,} | {r['running']} | {r['first_decision_ms']:.1f} "
            f"| {r['admitted']} | {r['evicted']} |"
        )
    return "\n".join(lines)


SECTION = """{heading}

What it measures: the pure scheduling core (`controlplane/scheduling/`), no database. One
`schedule()` call does admission (quota, cohort borrowing, fair share, StrictFIFO /
BestEffortFIFO), the preemption search, a reason and queue position for every waiting job, and
the bandwidth allocation of every job that holds slots afterwards ("allocation alone" times
`allocate()` on that set). The cluster has 80% of the tenants' nominal slots and is 70% full,
so most pending jobs wait and many try preemption. The policy table replays one network-bound
trace ({jobs} jobs, 4 tenants in one cohort, fabric 10 Gbit/s, deadlines on high and critical
jobs) in the simulator with allocation by priority (the scheduler), equal shares, and none
(first come first served on the shared link); admission is the scheduler's in all three.

Command (about a minute; `--quick` takes seconds; `--docs` also rewrites this section):

```
{command}
```

Results (`bench-results/scheduler.json`; CPU time of the benchmark process, best of several
tries, on 2 cores shared with other test runs: compare ratios within one run):

{table}

Reading: the targets are <= 1 ms per pending job at 10k pending and <= 10 ms to allocate for
1k running jobs; both hold by a wide margin. A decision is one pass over the pending jobs
(O(n log t) for n pending jobs of t tenants), so cost grows about linearly with pending jobs
(the "vs 1k" column; the 1k rows carry the fixed cost of the running jobs, which is why the
growth looks sub-linear with 1000 tenants); per-job cost rises at 100k from object churn
(100k reason strings and records, and the garbage collector). Allocating by priority x deadline urgency cuts the deadline
misses of high and critical jobs against equal shares and FCFS; the price is a longer tail for
low and normal jobs, which yield bandwidth to them.

### Kueue's baseline, growth, and a 50,000-job backlog

Kueue's scheduler performance "baseline" (15,000 workloads in 30 queues of 5 cohorts) converted
by `tests/benchmarks/kueue_trace.py` (its docstring says which config it read and how each part
maps) and replayed by the simulator, which keeps one `Queues` between decisions. Kueue's figures
are the means its own check (`rangespec.yaml`) records for runs of its real controller on a
test API server; ours are simulated, with decisions free and instant unless a row says it
charges each admission the real path's measured cost (one over the admissions per second
`bench_admission.py` measured on PostgreSQL, from `bench-results/admission.json`). Waits are
the mean time from arrival to first
admission per workload class; "work lost" is run time destroyed by evictions (no workload
checkpoints).

{kueue}

Reading: without protection the livelock is there (mediums evicted by each
new large arrival, ~50 times each); the eviction limit does not stop it, because each eviction is
by a newly arrived higher-priority job, which the limit allows by design. A minimum run time
stops it (max 3 evictions per job, a third of the work lost), at the price of a long wait for
the large jobs, which may no longer cut short the small ones they used to evict. Replay CPU
grows about linearly with the trace (the scheduler that re-walked the backlog took 68 s, 284 s and 1,218 s for 1x, 2x
and 4x before decisions became incremental). A decision with a 50,000-job backlog costs what the
dirty tenants' equivalence classes cost, not the backlog, but the 50 ms target is missed: the
mean is about 20 ms, the first decision (all 100 tenants, about 48 classes each) about 55-60 ms,
and the slowest single decision about 100 ms. The spikes were Python's garbage collector walking
the backlog's objects: the same run with the collector off gave a slowest decision of 54 ms
(the first) and a mean of 18 ms. Measured again on the core with node placement (`big_backlog`
alone, four runs, load average about 30): first decision 68-81 ms, slowest after it 36-44 ms,
mean 21-23 ms, the same with and without `gc.freeze()` after loading the backlog, so the
collector no longer makes the slowest decision; what stays over 50 ms is the first one, which
looks at every tenant from cold.
"""


def update_docs(results: dict[str, Any]) -> None:
    """Replace this benchmark's section of docs/benchmarks.md (create the file if missing),
    leaving every other section as it is."""
    section = SECTION.format(
        heading=HEADING,
        jobs=results["policy_comparison"][0]["jobs"],
        command=".venv/bin/python tests/benchmarks/bench_scheduler.py",
        table=markdown(results),
        kueue=kueue_markdown(results),
    )
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n\n"
    start = text.find(HEADING)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(HEADING))
        rest = "" if end < 0 else text[end + 1 :]
        text = text[:start] + section + ("\n" + rest if rest else "")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description="Benchmark the scheduling core.")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes (< 1 min)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--docs", action="store_true", help="rewrite the docs section too")
    args = parser.parse_args()
    sizes = [(p, t) for p in (1_000, 10_000, 100_000) for t in (10, 100, 1000)]
    if args.quick:
        sizes = [(p, t) for p, t in sizes if p < 100_000] + [(100_000, 100)]
    repeats = 1 if args.quick else 3
    print("decision cost (schedule: admission + preemption + reasons + allocation)", flush=True)
    results: dict[str, Any] = {
        "command": "python tests/benchmarks/bench_scheduler.py"
        + (" --quick" if args.quick else ""),
        "quick": args.quick,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "decision_cost": decision_cost(sizes, repeats),
    }
    results["allocation_cost"] = allocation_cost(repeats * 5)
    print("bandwidth policy on a network-bound trace", flush=True)
    results["policy_comparison"] = policy_comparison(60 if args.quick else 200)
    print("Kueue's baseline (15,000 workloads), converted by kueue_trace.py", flush=True)
    results["kueue_baseline"] = kueue_baseline()
    print("growth with the trace (CPU)", flush=True)
    results["growth"] = growth([1, 2] if args.quick else [1, 2, 4])
    print("incremental decisions with a large backlog", flush=True)
    results["big_backlog"] = big_backlog(10_000 if args.quick else 50_000, 300)
    print("the first decision against the backlog (one cluster)", flush=True)
    backlogs = [500, 5_000] if args.quick else [500, 5_000, 50_000]
    results["first_decision_by_backlog"] = first_decision_by_backlog(backlogs, repeats)
    at_10k = [r["us_per_pending_job"] for r in results["decision_cost"] if r["pending"] == 10_000]
    results["targets"] = {
        "decision_us_per_pending_job_at_10k_max": max(at_10k),
        "decision_target_us": 1000,
        "allocation_ms": results["allocation_cost"]["allocation_ms"],
        "allocation_target_ms": 10,
        "median_us_per_pending_job": statistics.median(
            r["us_per_pending_job"] for r in results["decision_cost"]
        ),
        "growth_cpu_ratio_at_largest": results["growth"][-1]["cpu_ratio"],
        "growth_scale_at_largest": results["growth"][-1]["scale"],
        "growth_target_ratio_at_4x": 4.5,
        "decision_max_ms_with_backlog": results["big_backlog"]["decision_max_ms"],
        "backlog_pending": results["big_backlog"]["pending"],
        "decision_target_ms_at_50k": 50,
    }
    print()
    print(markdown(results))
    print()
    print(kueue_markdown(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    if args.docs and not args.quick:
        update_docs(results)
        print(f"wrote the {HEADING!r} section of {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
