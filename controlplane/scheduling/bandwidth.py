"""Bandwidth allocation: how many bit/s each running job gets right now.

Recomputed on every admission, completion, priority change and link change, in four steps:

1. **Floors first, in priority order.** Jobs are taken by priority (highest first), then start
   time; each gets its floor if the fabric still has room. Admission reserved every floor, so
   all are met unless the fabric shrank; then the lowest priorities lose theirs first.
2. **Tenant budgets.** A tenant's demand is the sum of its jobs' ceilings (a job without a
   ceiling demands the whole fabric). It is guaranteed ``min(demand, nominal)`` (and at least its
   floors). Tenants of a cohort lend their unused nominal (up to their lending limit) and
   borrowers share that pool by weighted max-min (tenant fair-share weight, each capped by its
   borrowing limit and unmet demand). Lending is recomputed every time, so a lender whose demand
   comes back reclaims its quota on the next allocation. If budgets overcommit the fabric they
   are cut by weighted max-min, never below a tenant's floors.
3. **Jobs within a budget** share it by weighted max-min fairness (water-filling), weight =
   priority value x deadline urgency, each job between its floor and its ceiling.
4. Nothing is ever above a ceiling, and the sum never exceeds the fabric.

On a cluster given with nodes, fabric is a per-node resource: a job whose placement spans
nodes uses its allocation on *each* node it spans, a job on one node uses none (its ranks talk
over the node's own memory or loopback). So step 1 grants a spanning job's floor only where
every node it spans still has room (a local job's floor always); step 2 has no pooled fabric to
cut budgets to; a spanning job is capped by the slowest fabric among its nodes, a local job
only by its ceiling (its node's fabric stands in when it has none); and a last step 5 walks the nodes by name and, where the spanning jobs' allocations add
up to more than the node's fabric, water-fills that fabric among them (by the same weights,
floors kept, never raising anyone), so no node is ever over its fabric. What a node cut takes
from a job is not offered to others in the same allocation.

Water-filling with floors and caps finds the level ``x`` at which
``sum(clamp(w_i * x, floor_i, cap_i)) == total`` by sweeping the sorted breakpoints, so it costs
O(n log n).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from .types import Allocation, Cluster, JobRequest, Node, Placement, RunningJob, TenantQuota

# Deadline urgency: 1 while the job would finish with at least half its remaining time to spare,
# then rising linearly with needed/left time, up to MAX_URGENCY (also used once a deadline passed).
RELAXED_RATIO = 0.5
MAX_URGENCY = 4.0


def urgency(job: JobRequest, now: float) -> float:
    """Return the deadline urgency of ``job`` at ``now``: 1.0 (no pressure) to MAX_URGENCY.

    ``ratio`` is the time the remaining work needs at the current rate over the time left; a job
    with ratio <= 0.5 has urgency 1, a job exactly on the edge (ratio 1) has urgency 2, a job
    that would miss at its current rate (ratio > 1) more, capped at MAX_URGENCY. With no deadline
    the urgency is 1; with no rate estimate only a passed deadline counts.
    """
    if job.deadline is None:
        return 1.0
    left = job.deadline - now
    if left <= 0:
        return MAX_URGENCY
    if job.remaining_steps is None or not job.steps_per_second:
        return 1.0
    ratio = job.remaining_steps / job.steps_per_second / left
    return min(MAX_URGENCY, max(1.0, 1.0 + 2.0 * (ratio - RELAXED_RATIO)))


def water_fill(
    weights: Sequence[float], floors: Sequence[float], caps: Sequence[float], total: float
) -> list[float]:
    """Return weighted max-min fair shares of ``total``.

    Share ``i`` is ``clamp(weights[i] * x, floors[i], caps[i])`` for the largest level ``x`` at
    which the shares sum to at most ``total``. Needs ``weights > 0`` and ``floors <= caps``. If the
    floors alone exceed ``total`` the floors are returned (the caller decides who gets a floor);
    if the caps fit, the caps are returned.
    """
    if sum(floors) >= total:
        return list(floors)
    if sum(caps) <= total:
        return list(caps)
    events: list[tuple[float, int, int]] = []
    for i, weight in enumerate(weights):
        events.append((floors[i] / weight, 0, i))  # from here the share grows with x
        events.append((caps[i] / weight, 1, i))  # from here the share stays at its cap
    events.sort()
    fixed = sum(floors)  # sum of shares that do not grow at the current level
    slope = 0.0  # sum of weights of shares that grow
    level = math.inf
    for x, kind, i in events:
        if slope > 0 and fixed + slope * x >= total:
            level = (total - fixed) / slope
            break
        if kind == 0:
            fixed -= floors[i]
            slope += weights[i]
        else:
            fixed += caps[i]
            slope -= weights[i]
    return [min(caps[i], max(floors[i], weights[i] * level)) for i in range(len(weights))]


def _floor_order(job: JobRequest) -> tuple[int, float, str]:
    # A JobRequest here was admitted in this decision: it is the newest of all.
    started = job.started_at if isinstance(job, RunningJob) else math.inf
    return (-job.priority, started, job.id)


def _grant_floors(jobs: Sequence[JobRequest], fabric: float) -> dict[str, float]:
    """Step 1: floors by priority (then start time, then id) while the fabric has room."""
    granted: dict[str, float] = {}
    left = fabric
    for job in sorted(jobs, key=_floor_order):
        floor = job.bandwidth_floor_bps
        granted[job.id] = floor if floor <= left else 0.0
        left -= granted[job.id]
    return granted


class _TenantDemand:
    __slots__ = ("budget", "demand", "floors", "jobs", "quota")

    def __init__(self, quota: TenantQuota) -> None:
        self.quota = quota
        self.jobs: list[JobRequest] = []
        self.floors = 0.0
        self.demand = 0.0
        self.budget = 0.0


def _budgets(everyone: list[_TenantDemand], fabric: float) -> None:
    """Step 2: set each tenant's budget from its quota, its cohort's lending and the fabric."""
    cohorts: dict[str, list[_TenantDemand]] = {}
    for t in everyone:
        t.budget = max(t.floors, min(t.demand, t.quota.nominal_bandwidth_bps))
        if t.quota.cohort is not None:
            cohorts.setdefault(t.quota.cohort, []).append(t)
    for members in cohorts.values():
        _lend(members)
    if sum(t.budget for t in everyone) > fabric:
        cut = water_fill(
            [t.quota.weight for t in everyone],
            [t.floors for t in everyone],
            [t.budget for t in everyone],
            fabric,
        )
        for t, budget in zip(everyone, cut, strict=True):
            t.budget = budget


def _lend(members: list[_TenantDemand]) -> None:
    """Share the cohort's unused nominal bandwidth among members with unmet demand."""
    pool = 0.0
    for t in members:
        nominal = t.quota.nominal_bandwidth_bps
        lend_limit = math.inf if t.quota.lending_limit_bps is None else t.quota.lending_limit_bps
        pool += min(lend_limit, max(0.0, nominal - t.budget))
        # Floors above nominal (only after a quota was lowered) already use the pool.
        pool -= max(0.0, t.budget - nominal)
    wants = []
    for t in members:
        nominal = t.quota.nominal_bandwidth_bps
        borrow_limit = (
            math.inf if t.quota.borrowing_limit_bps is None else t.quota.borrowing_limit_bps
        )
        wants.append(max(0.0, min(t.demand, nominal + borrow_limit) - t.budget))
    if pool <= 0 or not any(wants):
        return
    shares = water_fill([t.quota.weight for t in members], [0.0] * len(members), wants, pool)
    for t, extra in zip(members, shares, strict=True):
        t.budget += extra


def allocate(
    *,
    cluster: Cluster,
    tenants: Iterable[TenantQuota],
    running: Sequence[JobRequest],
    now: float,
    placements: Mapping[str, Placement] | None = None,
) -> dict[str, Allocation]:
    """Return the allocation of every job in ``running``, keyed by job id.

    ``running`` are the jobs that hold slots (their floors were reserved at admission). A job
    of a tenant missing from ``tenants`` gets its floor only. On a cluster with nodes, a job's
    placement is ``placements[job.id]``, else its own (a :class:`RunningJob`'s); a job with
    neither counts as local to one node.
    """
    fabric = cluster.fabric_bps
    nodes = _Nodes(cluster.nodes, running, placements or {}) if cluster.nodes else None
    caps = {job.id: _cap(job, fabric) if nodes is None else nodes.cap(job) for job in running}
    floors = _grant_floors(running, fabric) if nodes is None else nodes.grant_floors(running)
    # Every tenant takes part, idle ones too: their unused quota is what a cohort lends.
    by_tenant = {q.name: _TenantDemand(q) for q in tenants}
    for job in running:
        t = by_tenant.get(job.tenant)
        if t is None:
            quota = TenantQuota(name=job.tenant, nominal_slots=0, nominal_bandwidth_bps=0)
            t = by_tenant[job.tenant] = _TenantDemand(quota)
        t.jobs.append(job)
        t.floors += floors[job.id]
        t.demand += max(floors[job.id], caps[job.id])
    _budgets(list(by_tenant.values()), fabric if nodes is None else math.inf)
    allocations: dict[str, Allocation] = {}
    for t in by_tenant.values():
        pressing = [urgency(job, now) for job in t.jobs]
        weights = [job.priority * u for job, u in zip(t.jobs, pressing, strict=True)]
        shares = water_fill(
            weights,
            [floors[job.id] for job in t.jobs],
            [max(floors[job.id], caps[job.id]) for job in t.jobs],
            t.budget,
        )
        for job, bps, u, w in zip(t.jobs, shares, pressing, weights, strict=True):
            allocations[job.id] = Allocation(
                job_id=job.id,
                tenant=job.tenant,
                bps=bps,
                weight=w,
                urgency=u,
                floor_met=floors[job.id] >= job.bandwidth_floor_bps,
            )
    if nodes is not None:
        nodes.fit(allocations, floors)
    return allocations


class _Nodes:
    """Per-node fabric for :func:`allocate` (a cluster given with nodes)."""

    def __init__(
        self,
        nodes: Sequence[Node],
        running: Sequence[JobRequest],
        placements: Mapping[str, Placement],
    ) -> None:
        self.fabric = {n.name: n.fabric_bps for n in nodes}
        self.widest = max(self.fabric.values(), default=0.0)
        self.on: dict[str, tuple[str, ...]] = {}  # job id -> the known nodes it runs on
        self.spanning: dict[str, list[str]] = {}  # node -> ids of spanning jobs on it
        self.spanners: set[str] = set()
        for job in running:
            placement = placements.get(job.id)
            if placement is None and isinstance(job, RunningJob):
                placement = job.placement
            known = tuple(n for n in (placement.nodes if placement else ()) if n in self.fabric)
            self.on[job.id] = known
            if placement is not None and placement.spans:
                self.spanners.add(job.id)
                for node in known:
                    self.spanning.setdefault(node, []).append(job.id)

    def spans(self, job: JobRequest) -> bool:
        return job.id in self.spanners

    def cap(self, job: JobRequest) -> float:
        """The most the job may get: a spanning job, its ceiling and the slowest fabric among
        its nodes; a local job, its ceiling (it uses no fabric), else its node's fabric as a
        stand-in for a finite demand."""
        ceiling = job.bandwidth_ceiling_bps
        reach = min((self.fabric[n] for n in self.on[job.id]), default=self.widest)
        if job.id in self.spanners:
            return reach if ceiling is None else min(ceiling, reach)
        return reach if ceiling is None else ceiling

    def grant_floors(self, jobs: Sequence[JobRequest]) -> dict[str, float]:
        """Step 1 per node: a spanning job's floor where all its nodes still have room."""
        left = dict(self.fabric)
        granted: dict[str, float] = {}
        for job in sorted(jobs, key=_floor_order):
            floor = job.bandwidth_floor_bps
            if not self.spans(job):
                granted[job.id] = floor
                continue
            known = self.on[job.id]
            fits = all(floor <= left[n] for n in known)
            granted[job.id] = floor if fits else 0.0
            for n in known:
                left[n] -= granted[job.id]
        return granted

    def fit(self, allocations: dict[str, Allocation], floors: Mapping[str, float]) -> None:
        """Step 5: cut the spanning jobs' allocations on every node over its fabric."""
        for node in sorted(self.spanning):
            ids = self.spanning[node]
            if sum(allocations[i].bps for i in ids) <= self.fabric[node] * (1 + 1e-12):
                continue
            cut = water_fill(
                [allocations[i].weight for i in ids],
                [floors[i] for i in ids],
                [allocations[i].bps for i in ids],
                self.fabric[node],
            )
            for i, bps in zip(ids, cut, strict=True):
                allocations[i] = replace(allocations[i], bps=min(bps, allocations[i].bps))


def _cap(job: JobRequest, fabric: float) -> float:
    ceiling = job.bandwidth_ceiling_bps
    return fabric if ceiling is None else min(ceiling, fabric)
