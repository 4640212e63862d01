"""Kueue's scheduler performance "baseline" as a Synclane trace (simulator format).

    python tests/benchmarks/kueue_trace.py > kueue-baseline.json            # 15,000 workloads
    python tests/benchmarks/kueue_trace.py --scale 4 > kueue-baseline-4x.json
    python -m controlplane.scheduling.simulate kueue-baseline.json

What it reads: the generator config of Kueue's scheduler performance test, "baseline"
(kubernetes-sigs/kueue, test/performance/scheduler/configs/baseline/generator.yaml, commit
cc13fff80cdc), transcribed into :data:`BASELINE` below, and the figures Kueue checks a run
against (rangespec.yaml next to it, the means of five runs), in :data:`PUBLISHED`.

What the config declares, and how it becomes a trace:

- 5 cohorts, each of 6 ClusterQueues; every queue has a nominal quota of 20 (one resource,
  CPU) and may borrow up to 100 more from its cohort; reclaiming lent quota may take any
  workload, preemption within a queue only lower priorities. Each queue becomes a tenant of
  20 slots in its cohort, borrowing limit 100, policy ``LowerPriority`` (our reclaim takes any
  priority, as ``reclaimWithinCohort: Any`` does), BestEffortFIFO (Kueue's default queueing
  strategy). The cluster is the sum of the quotas (600 slots): Kueue's test has no other limit.
- Each queue receives three streams of workloads, created concurrently, one every
  ``creationIntervalMs`` (the first after one interval): 350 "small" (1 slot, 200 ms, priority
  50) every 100 ms, 100 "medium" (5 slots, 500 ms, priority 100) every 500 ms and 50 "large"
  (20 slots, 1,000 ms, priority 200) every 1,200 ms: 500 per queue, 15,000 in all. Each becomes
  a job arriving at that time, running that long once admitted (Kueue's runner marks a workload
  finished ``runtimeMs`` after admission), with its priority as given.
- Bandwidth plays no part: every job has ``comm_fraction`` 0 and no floor. No workload
  checkpoints, so an eviction loses all the work done (the trace's checkpoint interval is far
  longer than any run).

``--scale N`` multiplies every stream's count by N (same intervals, so arrivals go on N times
longer): the 2x and 4x traces of the growth measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# generator.yaml, baseline: one cohort class (count 5) with one queue class (count 6).
BASELINE: dict[str, Any] = {
    "cohorts": 5,
    "queues_per_cohort": 6,
    "nominal_quota": 20,
    "borrowing_limit": 100,
    "reclaim_within_cohort": "Any",
    "within_cluster_queue": "LowerPriority",
    "workload_sets": [
        {"count": 350, "interval_ms": 100, "class": "small", "runtime_ms": 200, "priority": 50,
         "request": 1},
        {"count": 100, "interval_ms": 500, "class": "medium", "runtime_ms": 500, "priority": 100,
         "request": 5},
        {"count": 50, "interval_ms": 1200, "class": "large", "runtime_ms": 1000, "priority": 200,
         "request": 20},
    ],
}  # fmt: skip

# rangespec.yaml, baseline: averages of 5 runs of Kueue's minimalkueue on envtest.
PUBLISHED = {
    "wall_ms": 351_116.4,
    "min_cq_usage_pct": 58.7,
    "avg_time_to_admission_ms": {"large": 6_666, "medium": 76_768, "small": 215_468},
}


def tenants(config: dict[str, Any]) -> list[dict[str, Any]]:
    """One tenant per ClusterQueue, named like Kueue's (``cq-<set>-<index>-<cohort>``)."""
    return [
        {
            "name": f"cq-0-{q}-cohort-{c}",
            "nominal_slots": config["nominal_quota"],
            "nominal_mbps": 1000,
            "cohort": f"cohort-{c}",
            "borrowing_limit_slots": config["borrowing_limit"],
            "queue_policy": "BestEffortFIFO",
            "preemption": config["within_cluster_queue"],
        }
        for c in range(config["cohorts"])
        for q in range(config["queues_per_cohort"])
    ]


def jobs(config: dict[str, Any], tenant_names: list[str], scale: int) -> list[dict[str, Any]]:
    """Every workload of every queue, arriving one interval after the previous of its stream."""
    out = []
    for name in tenant_names:
        for index, stream in enumerate(config["workload_sets"]):
            for n in range(stream["count"] * scale):
                out.append(
                    {
                        "id": f"{name}/{stream['class']}-{index}-{n}",
                        "tenant": name,
                        "arrival": (n + 1) * stream["interval_ms"],
                        "slots": stream["request"],
                        "priority": stream["priority"],
                        "duration": stream["runtime_ms"],
                        "comm_fraction": 0.0,
                    }
                )
    return out


def trace(scale: int = 1, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The baseline as a trace (times in ms), its workload counts multiplied by ``scale``."""
    quotas = tenants(BASELINE)
    return {
        "time_unit": "ms",
        "cluster": {
            "slots": sum(t["nominal_slots"] for t in quotas),
            "fabric_mbps": 1000 * len(quotas),
        },
        "tick_s": 60_000,  # bandwidth plays no part: no need to re-allocate on a timer
        "checkpoint_s": 3_600_000,  # no workload checkpoints
        "options": options or {},
        "tenants": quotas,
        "jobs": jobs(BASELINE, [t["name"] for t in quotas], scale),
    }


def class_of(job_id: str) -> str:
    """The Kueue workload class ("small", "medium", "large") of a converted job id."""
    return job_id.split("/", 1)[1].split("-", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description="Print Kueue's baseline as a Synclane trace.")
    parser.add_argument("--scale", type=int, default=1, help="multiply workload counts by N")
    args = parser.parse_args()
    json.dump(trace(args.scale), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
