"""Benchmark of many machines: placement in the pure core, and runs across local nodes.

    python tests/benchmarks/bench_cluster.py                     # placement
    python tests/benchmarks/bench_cluster.py --quick             # fewer events, runs
    python tests/benchmarks/bench_cluster.py --only placement    # one section
    python tests/benchmarks/bench_cluster.py --only runtime      # runs across nodes (slow)

Each section is a function in ``SECTIONS`` that returns its own dict (``rows`` plus anything
else); ``bench-results/cluster.json`` holds one key per section and a run rewrites only the
sections it ran, so sections written by other runs (or added by other code) are kept.

**placement** (the pure core, no database): a cluster of 10, 100 and 1,000 nodes of 8 slots
(a quarter labelled ``gpu=h200``, the rest ``gpu=a100``; 100 Gbit/s fabric; each node has
measured links to 4 others, 2% of them degraded), 100 tenants in cohorts of ten whose nominal
quotas add up to the cluster, jobs of 1 to 32 ranks (16 and 32 always span nodes; a quarter
ask for a label; a third have a bandwidth floor). The cluster is filled by admissions, then
10,000 jobs wait. Then ``events`` times: a running job ends, a new job arrives, and one
incremental decision (``Queues.decide``: admission, preemption and placement for the tenants
those events may have unblocked) runs. ``placement_ms`` is the mean CPU time of those
decisions (target < 10 ms at 1,000 nodes); ``pooled_ms`` replays the same events on the same
cluster given without nodes (one pool: the admission core without placement) so the ratio is
what placement adds; ``place_us`` is one ``Topology.place`` of a 32-rank job with half the
running jobs held (fragmented, half full); ``first_ms`` the first decision over the whole
backlog. With 10,000 jobs waiting the cluster stays full: every slot a job frees is taken by
the next decision, which is the case the incremental decision is measured in.

Times are CPU time of this single-threaded process; compare ratios within one run.

**runtime** (a real stack, ``tests/faults.FaultStack`` with three Celery workers, each a node
of its own on loopback: n1..n3 at 127.0.0.1..3, one beat, ingest, daphne, its own Redis and
SQLite database). Jobs are admitted with ``Job.placement["nodes"]`` and one launch per node
on the node's queue, as the scheduler service does. ``startup``: a 6-rank tiny_gpt job on 1,
2 and 3 nodes (6, 3+3, 2+2+2 ranks), seconds from admission to ``running`` (every node has
spawned its torchrun) and to the first step (every rank joined the rendezvous and made a
step). ``throughput``: steps/s of the same 4-rank job on one node and split 2+2, the split
run paced at the emulated link between nodes (``SYNCLANE_INTERNODE_LINK_MBPS``); steps/s is
the run's own ``summary.json`` (training loop only), side by side in one run as a ratio.
Wall-clock seconds on a shared machine: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controlplane.scheduling import (  # noqa: E402
    Cluster,
    JobRequest,
    Link,
    Node,
    Queues,
    TenantQuota,
    Topology,
)
from tests.faults import wait_until  # noqa: E402

OUT = ROOT / "bench-results" / "cluster.json"
GBIT = 1e9
SIZES = (1, 2, 4, 8, 8, 16, 32)
PRIORITIES = (100, 200, 300, 400)


# --- placement ---------------------------------------------------------------------------------


def nodes_for(count: int, rng: random.Random) -> tuple[list[Node], list[Link]]:
    nodes = [
        Node(
            name=f"n{i:04d}",
            slots=8,
            fabric_bps=100 * GBIT,
            labels={"gpu": "h200" if i % 4 == 0 else "a100"},
        )
        for i in range(count)
    ]
    links = {}
    for i in range(count):
        for j in rng.sample(range(count), min(4, count - 1) + 1):
            if j != i:
                a, b = sorted((nodes[i].name, nodes[j].name))
                links[(a, b)] = Link(
                    a=a,
                    b=b,
                    bandwidth_bps=rng.uniform(40, 100) * GBIT,
                    degraded=rng.random() < 0.02,
                )
    return nodes, list(links.values())


def tenants_for(slots: int, count: int, rng: random.Random) -> list[TenantQuota]:
    share = slots / count
    return [
        TenantQuota(
            name=f"t{i}",
            nominal_slots=max(1, round(share * rng.choice([0.5, 1.0, 1.5]))),
            nominal_bandwidth_bps=rng.choice([100, 200, 500]) * GBIT,
            cohort=f"c{i // 10}",
        )
        for i in range(count)
    ]


def a_job(job_id: str, now: float, tenants: list[TenantQuota], rng: random.Random) -> JobRequest:
    return JobRequest(
        id=job_id,
        tenant=rng.choice(tenants).name,
        slots=rng.choice(SIZES),
        submit_time=now,
        priority=rng.choice(PRIORITIES),
        bandwidth_floor_bps=rng.choice([0.0, 0.0, 5 * GBIT]),
        node_selector=rng.choice([None, None, None, {"gpu": rng.choice(["h200", "a100"])}]),
    )


def loaded_queues(
    cluster: Cluster, tenants: list[TenantQuota], pending: int, seed: int
) -> tuple[Queues, float]:
    """Queues filled by admissions (until a decision admits nothing), then ``pending`` more
    jobs; returns them and the first decision's CPU time over the whole backlog."""
    rng = random.Random(seed)
    queues = Queues(cluster, tenants)
    for i in range(4 * cluster.slots // 8 + 10):
        queues.submit(a_job(f"fill{i}", 0.0, tenants, rng))
    queues.decide(0.0)
    for i in range(pending):
        queues.submit(a_job(f"p{i}", 1.0, tenants, rng))
    began = time.process_time()
    queues.decide(1.0)
    return queues, time.process_time() - began


def replay(queues: Queues, tenants: list[TenantQuota], events: int, seed: int) -> list[float]:
    """``events`` times: one job ends, one arrives, one decision; returns each decision's CPU."""
    rng = random.Random(seed)
    times = []
    for i in range(events):
        now = 2.0 + i
        if queues.running:
            queues.release(rng.choice(sorted(queues.running)))
        queues.submit(a_job(f"new{i}", now, tenants, rng))
        began = time.process_time()
        queues.decide(now)
        times.append(time.process_time() - began)
    return times


def place_cost(queues: Queues, nodes: list[Node], links: list[Link], repeats: int) -> float:
    """CPU seconds of one 32-rank placement (best of ``repeats``) with every other running job
    held: a fragmented cluster about half full (a full one would refuse at once)."""
    topology = Topology(nodes, links)
    for job in sorted(queues.running.values(), key=lambda j: j.id)[::2]:
        if job.placement is not None:
            topology.hold(job.id, job.placement, job.bandwidth_floor_bps)
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        topology.place(32)
        best = min(best, time.process_time() - began)
    return best


def placement_row(count: int, pending: int, events: int) -> dict[str, Any]:
    rng = random.Random(count)
    nodes, links = nodes_for(count, rng)
    topology = Cluster.from_nodes(nodes, links)
    pooled = Cluster(slots=topology.slots, fabric_bps=topology.fabric_bps)
    tenants = tenants_for(topology.slots, 100, rng)
    queues, first = loaded_queues(topology, tenants, pending, seed=count)
    used = sum(j.slots for j in queues.running.values())
    spanning = sum(1 for j in queues.running.values() if j.placement and j.placement.spans)
    times = replay(queues, tenants, events, seed=count + 1)
    # The pooled baseline: same tenants, same jobs, same events, no nodes. Jobs that ask for a
    # label cannot run on a pool, so the baseline's jobs ask for none.
    plain = Queues(pooled, tenants)
    base_queues, _ = _unlabelled(plain, tenants, pending, count)
    base_times = replay(base_queues, tenants, events, seed=count + 1)
    row = {
        "nodes": count,
        "pending": pending,
        "placement_ms": statistics.fmean(times) * 1e3,
        "placement_p99_ms": _p99(times) * 1e3,
        "placement_max_ms": max(times) * 1e3,
        "pooled_ms": statistics.fmean(base_times) * 1e3,
        "place_us": place_cost(queues, nodes, links, 20) * 1e6,
        "first_ms": first * 1e3,
        "events": events,
        "slots": topology.slots,
        "slots_used": used,
        "running": len(queues.running),
        "running_spanning": spanning,
        "links": len(links),
    }
    print(
        f"  {count:>5} nodes {pending:>6} pending: decision mean {row['placement_ms']:7.2f} ms "
        f"p99 {row['placement_p99_ms']:7.2f} max {row['placement_max_ms']:7.2f} | pooled "
        f"{row['pooled_ms']:6.2f} ms | one 32-rank place {row['place_us']:7.0f} us | "
        f"{used}/{topology.slots} slots, {spanning} spanning jobs",
        flush=True,
    )
    return row


def _unlabelled(
    queues: Queues, tenants: list[TenantQuota], pending: int, seed: int
) -> tuple[Queues, float]:
    rng = random.Random(seed)
    for i in range(4 * int(queues.ledger.capacity[0]) // 8 + 10):
        queues.submit(_plain(a_job(f"fill{i}", 0.0, tenants, rng)))
    queues.decide(0.0)
    for i in range(pending):
        queues.submit(_plain(a_job(f"p{i}", 1.0, tenants, rng)))
    began = time.process_time()
    queues.decide(1.0)
    return queues, time.process_time() - began


def _plain(job: JobRequest) -> JobRequest:
    fields = {k: getattr(job, k) for k in ("id", "tenant", "slots", "submit_time", "priority")}
    return JobRequest(**fields, bandwidth_floor_bps=job.bandwidth_floor_bps)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def placement_section(args: argparse.Namespace) -> dict[str, Any]:
    print("placement: incremental decisions with 10,000 jobs waiting", flush=True)
    events = 100 if args.quick else 300
    rows = [placement_row(count, 10_000, events) for count in (10, 100, 1000)]
    return {
        "command": "python tests/benchmarks/bench_cluster.py --only placement"
        + (" --quick" if args.quick else ""),
        "rows": rows,
        "target_ms_at_1000_nodes": 10,
        "placement_ms_at_1000_nodes": rows[-1]["placement_ms"],
    }


def placement_markdown(section: dict[str, Any]) -> str:
    lines = [
        "| nodes | pending | decision mean (ms) | p99 (ms) | max (ms) | pooled, no placement (ms) "
        "| ratio | one 32-rank placement (us) | first decision (ms) | slots used | spanning jobs |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in section["rows"]:
        lines.append(
            f"| {r['nodes']} | {r['pending']} | {r['placement_ms']:.2f} "
            f"| {r['placement_p99_ms']:.2f} | {r['placement_max_ms']:.2f} | {r['pooled_ms']:.2f} "
            f"| {r['placement_ms'] / r['pooled_ms']:.1f}x | {r['place_us']:.0f} "
            f"| {r['first_ms']:.0f} | {r['slots_used']}/{r['slots']} | {r['running_spanning']} |"
        )
    return "\n".join(lines)


# --- runtime -----------------------------------------------------------------------------------

NODES = ("n1", "n2", "n3")
LINK_MBPS = 200.0
STARTUP_WORLD = 6


def split(world: int, nodes: int) -> list[tuple[str, list[int]]]:
    """``world`` ranks over the first ``nodes`` nodes, contiguous, as even as can be."""
    sizes = [world // nodes + (1 if i < world % nodes else 0) for i in range(nodes)]
    placed, first = [], 0
    for name, size in zip(NODES, sizes, strict=False):
        placed.append((name, list(range(first, first + size))))
        first += size
    return placed


def admit(nodes: list[tuple[str, list[int]]], *, steps: int, name: str) -> int:
    """Admit a tiny_gpt job placed on ``nodes`` and send its launches; return its id."""
    from django.db import transaction

    from controlplane.jobs import state
    from controlplane.jobs.models import Job
    from controlplane.lib.tasks import enqueue_on_commit
    from controlplane.tenancy.models import Tenant

    tenant = Tenant.objects.get(slug="vision")
    placement: dict[str, Any] = {}
    if len(nodes) > 1:
        placement["nodes"] = [
            {"node": n, "address": f"127.0.0.{NODES.index(n) + 1}", "ranks": r} for n, r in nodes
        ]
    with transaction.atomic():
        job = Job.objects.create(
            tenant=tenant,
            queue=tenant.queues.get(name="default"),
            name=name,
            workload="tiny_gpt",
            world_size=sum(len(r) for _, r in nodes),
            steps=steps,
            sync="full",
            hyperparameters={"seed": 7, "checkpoint_every": 1000, "batch_size": 8},
        )
        state.transition(job, "admitted", reason="placed by the benchmark", placement=placement)
        if len(nodes) > 1:
            for rank, (node, _) in enumerate(nodes):
                enqueue_on_commit("workers.tasks.launch_job", job.pk, rank, queue=f"node.{node}")
        else:
            enqueue_on_commit("workers.tasks.launch_job", job.pk, queue=f"node.{nodes[0][0]}")
    return int(job.pk)


def job_row(job_id: int) -> Any:
    from controlplane.jobs.models import Job

    return Job.objects.get(pk=job_id)


def finish(job_id: int, *, cancel: bool, timeout: float = 300) -> Any:
    from controlplane.jobs.services import job_cancel

    if cancel:
        job_cancel(job=job_row(job_id), actor=None)
    return wait_until(
        lambda: (j := job_row(job_id)).is_terminal and j,
        timeout,
        f"job {job_id} to end",
        interval=0.5,
    )


def startup(nodes: int, run: int) -> dict[str, Any]:
    t0 = time.monotonic()
    job_id = admit(split(STARTUP_WORLD, nodes), steps=100_000, name=f"startup-{nodes}-{run}")
    wait_until(lambda: job_row(job_id).status == "running", 180, "running", interval=0.05)
    running_s = time.monotonic() - t0
    wait_until(lambda: (job_row(job_id).last_step or 0) >= 1, 180, "a step", interval=0.05)
    first_step_s = time.monotonic() - t0
    finish(job_id, cancel=True)
    return {
        "section": "startup",
        "nodes": nodes,
        "world_size": STARTUP_WORLD,
        "to_running_s": round(running_s, 2),
        "to_first_step_s": round(first_step_s, 2),
    }


def throughput(stack: Any, placement: str, steps: int, run: int) -> dict[str, Any]:
    nodes = [("n1", [0, 1, 2, 3])] if placement == "1x4" else split(4, 2)
    job_id = admit(nodes, steps=steps, name=f"throughput-{placement}-{run}")
    job = finish(job_id, cancel=False)
    summary = json.loads((stack.workdir / "jobs" / f"job-{job_id}" / "summary.json").read_text())
    return {
        "section": "throughput",
        "placement": placement,
        "link_mbps": LINK_MBPS if placement != "1x4" else None,
        "status": job.status,
        "steps": summary["steps"],
        "steps_per_s": round(summary["steps"] / summary["wall_s"], 2),
    }


def runtime_section(args: argparse.Namespace) -> dict[str, Any]:
    from tests.faults import FaultStack

    runs = 1 if args.quick else 2
    steps = 40 if args.quick else 120
    print(f"runtime: {runs} run(s) per row on 3 local nodes", flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="synclane-cluster-") as tmp:
        stack = FaultStack.start(
            Path(tmp),
            nodes=len(NODES),
            SYNCLANE_NODE_SLOTS="6",
            SYNCLANE_INTERNODE_LINK_MBPS=str(LINK_MBPS),
            OMP_NUM_THREADS="1",
        )
        try:
            os.environ.update(stack.env)
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
            import django

            django.setup()
            for run in range(runs):
                for nodes in (1, 2, 3):
                    rows.append(startup(nodes, run))
                    print(rows[-1], flush=True)
                for placement in ("1x4", "2+2"):
                    rows.append(throughput(stack, placement, steps, run))
                    print(rows[-1], flush=True)
        finally:
            stack.stop()
    return {
        "command": "python tests/benchmarks/bench_cluster.py --only runtime"
        + (" --quick" if args.quick else ""),
        "startup": [r for r in rows if r["section"] == "startup"],
        "throughput": [r for r in rows if r["section"] == "throughput"],
        "link_mbps": LINK_MBPS,
    }


def runtime_markdown(section: dict[str, Any]) -> str:
    lines = [
        "| nodes | ranks | admission -> running (s, median) | admission -> first step (s, median) |",
        "|---:|---|---:|---:|",
    ]
    for nodes in (1, 2, 3):
        mine = [r for r in section["startup"] if r["nodes"] == nodes]
        if mine:
            ranks = "+".join(str(len(r)) for _, r in split(STARTUP_WORLD, nodes))
            running = statistics.median(r["to_running_s"] for r in mine)
            first = statistics.median(r["to_first_step_s"] for r in mine)
            lines.append(f"| {nodes} | {ranks} | {running:.1f} | {first:.1f} |")
    lines += [
        "",
        "| 4-rank job | link between nodes | steps/s (median) | vs one node |",
        "|---|---|---:|---:|",
    ]
    base = None
    for placement in ("1x4", "2+2"):
        mine = [r for r in section["throughput"] if r["placement"] == placement]
        if not mine:
            continue
        rate = statistics.median(r["steps_per_s"] for r in mine)
        base = base or rate
        link = f"{LINK_MBPS:.0f} Mbit/s (emulated)" if placement != "1x4" else "none (one node)"
        lines.append(f"| {placement} | {link} | {rate:.2f} | {rate / base:.2f}x |")
    return "\n".join(lines)


# --- the file ----------------------------------------------------------------------------------

# name -> (run, table): each section measures, returns its dict, and renders its table.
SECTIONS: dict[
    str, tuple[Callable[[argparse.Namespace], dict[str, Any]], Callable[[dict[str, Any]], str]]
] = {
    "placement": (placement_section, placement_markdown),
    "runtime": (runtime_section, runtime_markdown),
}


def merge(path: Path, results: dict[str, Any]) -> dict[str, Any]:
    """The file's sections, with the ones just measured replaced."""
    merged: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    merged.update(results)
    merged["python"] = platform.python_version()
    merged["machine"] = platform.machine()
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer events per row")
    # runtime starts a whole stack of three nodes and runs torchrun jobs (many minutes on a
    # loaded 2-core machine): only when asked for by name.
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), default=["placement"])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    results = {name: SECTIONS[name][0](args) for name in args.only}
    for name in args.only:
        print(f"\n{name}\n")
        print(SECTIONS[name][1](results[name]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(merge(args.out, results), indent=1) + "\n")
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"\nwrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
