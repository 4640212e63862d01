"""Where jobs' ranks are: read helpers over Job.placement (writes belong to the scheduler).

Job.placement holds ``{"nodes": [{"node", "address", "ranks"}], "why": ...}`` once the scheduler
placed the job, and the supervisor adds ``"node"`` (the node it runs on) when the run starts.

A run across nodes (two or more ``nodes``) runs one torchrun per node, in node-rank order (the
order of ``nodes``); torchrun numbers the global ranks node by node in that order, so node rank
i's first global rank is the sum of the earlier nodes' rank counts (``ranks_per_node``).
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.jobs.choices import ACTIVE
from controlplane.jobs.models import Job


def ranks_per_node(placement: object) -> tuple[int, ...]:
    """How many ranks each node of a run across nodes runs, in node-rank order.

    ``placement`` is a Job.placement; () for a run on one node (or a job not placed).
    """
    nodes = placement.get("nodes") if isinstance(placement, dict) else None
    if not isinstance(nodes, list) or len(nodes) < 2:
        return ()
    counts = []
    for entry in nodes:
        ranks = entry.get("ranks") if isinstance(entry, dict) else None
        counts.append(len(ranks) if isinstance(ranks, list) else 0)
    return tuple(counts)


def torchrun_stream(node_rank: int) -> str:
    """The name of node rank ``node_rank``'s torchrun output: its file in the run folder, less
    ``.log`` (``workers/supervisor/process.py``), and its log source on the job page."""
    return "torchrun" if node_rank == 0 else f"torchrun.node{node_rank}"


def active_jobs_on(name: str, jobs: Iterable[Job] | None = None) -> list[Job]:
    """Active jobs (admitted, running, restarting) with a rank placed on node ``name``."""
    pool = jobs if jobs is not None else Job.objects.filter(status__in=ACTIVE)
    return [job for job in pool if name in job.node_names]


def slots_used_by_node(jobs: Iterable[Job]) -> dict[str, int]:
    """Slots the given jobs hold on each node (their ranks per node, from their placements)."""
    used: dict[str, int] = {}
    for job in jobs:
        for row in job.rank_nodes:
            ranks = row.get("ranks")
            count = len(ranks) if isinstance(ranks, list) else job.world_size
            used[str(row["node"])] = used.get(str(row["node"]), 0) + count
    return used
