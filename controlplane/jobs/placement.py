"""Where jobs' ranks are: read helpers over Job.placement (writes belong to the scheduler).

Job.placement holds ``{"nodes": [{"node", "address", "ranks"}], "why": ...}`` once the scheduler
placed the job, and the supervisor adds ``"node"`` (the node it runs on) when the run starts.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.jobs.choices import ACTIVE
from controlplane.jobs.models import Job


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
