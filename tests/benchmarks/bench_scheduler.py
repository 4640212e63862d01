"""Benchmark of the scheduling core (issue 3).

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

from controlplane.scheduling import (  # noqa: E402
    Cluster,
    JobRequest,
    QueuePolicy,
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
"""


def update_docs(results: dict[str, Any]) -> None:
    """Replace this benchmark's section of docs/benchmarks.md (create the file if missing),
    leaving every other section as it is."""
    section = SECTION.format(
        heading=HEADING,
        jobs=results["policy_comparison"][0]["jobs"],
        command=".venv/bin/python tests/benchmarks/bench_scheduler.py",
        table=markdown(results),
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
    at_10k = [r["us_per_pending_job"] for r in results["decision_cost"] if r["pending"] == 10_000]
    results["targets"] = {
        "decision_us_per_pending_job_at_10k_max": max(at_10k),
        "decision_target_us": 1000,
        "allocation_ms": results["allocation_cost"]["allocation_ms"],
        "allocation_target_ms": 10,
        "median_us_per_pending_job": statistics.median(
            r["us_per_pending_job"] for r in results["decision_cost"]
        ),
    }
    print()
    print(markdown(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    if args.docs and not args.quick:
        update_docs(results)
        print(f"wrote the {HEADING!r} section of {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
