"""Properties of placement, whatever the nodes, labels, links and load (hypothesis).

The checks recompute what they need (free slots and fabric per node from the held placements,
the fewest nodes and the best choices by brute force over subsets) instead of reading the
placement code's own bookkeeping. Up to 7 nodes every choice is within EXACT_LIMIT, so the
placement must equal the brute-force optimum; from 9 to 16 nodes, with the local search
forced, it must still use the fewest nodes and no single swap may improve its choice.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections.abc import Sequence
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st

from controlplane.scheduling import (
    Cluster,
    JobRequest,
    Link,
    Node,
    Placement,
    Queues,
    RunningJob,
    Snapshot,
    TenantQuota,
    Topology,
    WaitCode,
    placement,
    schedule,
)

EXAMPLES = settings(max_examples=int(os.environ.get("SCHEDULING_EXAMPLES", "60")), deadline=None)
GBIT = 1e9
LABELS = [None, {"gpu": "h200"}, {"gpu": "a100"}]
TOLERANCE = 1e-3  # bit/s


@st.composite
def node_lists(draw: st.DrawFn, low: int = 1, high: int = 7) -> list[Node]:
    count = draw(st.integers(low, high))
    return [
        Node(
            name=f"n{i}",
            slots=draw(st.integers(0, 8)),
            fabric_bps=draw(st.sampled_from([1, 2, 4])) * GBIT,
            labels=draw(st.sampled_from([*LABELS, {"gpu": "h200"}])) or {},
            schedulable=draw(st.sampled_from([True] * 5 + [False])),
        )
        for i in range(count)
    ]


@st.composite
def link_lists(draw: st.DrawFn, nodes: list[Node]) -> list[Link]:
    pairs = list(itertools.combinations([n.name for n in nodes], 2))
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    return [
        Link(
            a=a,
            b=b,
            bandwidth_bps=draw(st.none() | st.sampled_from([0.5, 1.0, 2.0, 8.0]).map(GBIT.__mul__)),
            degraded=draw(st.booleans()),
        )
        for a, b in chosen
    ]


def jobs(prefix: str, most: int = 12) -> st.SearchStrategy[JobRequest]:
    return st.builds(
        JobRequest,
        id=st.integers(0, 10**6).map(lambda i: f"{prefix}{i}"),
        tenant=st.just("t"),
        slots=st.integers(1, most),
        submit_time=st.just(0.0),
        bandwidth_floor_bps=st.sampled_from([0.0, 0.0, 0.0, 0.5 * GBIT, GBIT, 3 * GBIT]),
        node_selector=st.sampled_from([None, None, None, {"gpu": "h200"}, {"gpu": "a100"}]),
    )


@st.composite
def loaded(
    draw: st.DrawFn, low: int = 1, high: int = 7
) -> tuple[list[Node], list[Link], list[RunningJob]]:
    """Nodes, links and running jobs placed on them by earlier placements."""
    nodes = draw(node_lists(low, high))
    links = draw(link_lists(nodes))
    topology = Topology(nodes, links)
    holding = []
    for i, job in enumerate(draw(st.lists(jobs("r", most=6), max_size=high // 2))):
        found = topology.place_job(job)
        if isinstance(found, Placement):
            topology.hold(f"r{i}", found, job.bandwidth_floor_bps)
            holding.append(
                RunningJob(**{**_fields(job), "id": f"r{i}"}, started_at=0.0, placement=found)
            )
    return nodes, links, holding


def _fields(job: JobRequest) -> dict[str, object]:
    return {
        k: getattr(job, k)
        for k in (
            "tenant",
            "slots",
            "submit_time",
            "bandwidth_floor_bps",
            "node_selector",
            "priority",
        )
    }


# --- independent accounting ------------------------------------------------------------------


def use(
    nodes: Sequence[Node], holding: Sequence[RunningJob]
) -> tuple[dict[str, int], dict[str, float]]:
    """Free slots and free fabric per node, from the held placements."""
    free = {n.name: n.slots for n in nodes}
    fabric = {n.name: n.fabric_bps for n in nodes}
    for job in holding:
        assert job.placement is not None
        for part in job.placement.parts:
            free[part.node] -= part.count
            if job.placement.spans:
                fabric[part.node] -= job.bandwidth_floor_bps
    return free, fabric


def eligible(nodes: Sequence[Node], job: JobRequest) -> list[Node]:
    selector = job.node_selector or {}
    return [
        n for n in nodes if n.schedulable and all(n.labels.get(k) == v for k, v in selector.items())
    ]


def linkmap(links: Sequence[Link]) -> dict[frozenset[str], Link]:
    return {frozenset((link.a, link.b)): link for link in links}


def score(
    names: Sequence[str],
    nodes: dict[str, Node],
    links: dict[frozenset[str], Link],
    free: dict[str, int],
    slots: int,
) -> tuple[int, float, int, tuple[str, ...]]:
    bad, slowest = 0, math.inf
    for a, b in itertools.combinations(names, 2):
        link = links.get(frozenset((a, b)))
        bad += bool(link and link.degraded)
        if link is not None and link.bandwidth_bps is not None:
            bps = link.bandwidth_bps
        else:
            bps = min(nodes[a].fabric_bps, nodes[b].fabric_bps)
        slowest = min(slowest, bps)
    return (bad, -slowest, sum(free[n] for n in names) - slots, tuple(sorted(names)))


def choices(
    job: JobRequest, nodes: Sequence[Node], free: dict[str, int], fabric: dict[str, float]
) -> tuple[int | None, list[tuple[str, ...]]]:
    """By brute force: the fewest nodes that hold the job, and every such choice."""
    pool = [n.name for n in eligible(nodes, job) if free[n.name] > 0]
    if any(free[n] >= job.slots for n in pool):
        return 1, [(n,) for n in pool if free[n] >= job.slots]
    spanning = [n for n in pool if fabric[n] + 1e-6 >= job.bandwidth_floor_bps]
    for k in range(2, len(spanning) + 1):
        fit = [
            c for c in itertools.combinations(spanning, k) if sum(free[n] for n in c) >= job.slots
        ]
        if fit:
            return k, fit
    return None, []


# --- properties of one placement -------------------------------------------------------------


def sized(
    data: st.DataObject, nodes: list[Node], free: dict[str, int], spanning: bool, wide: bool = False
) -> JobRequest:
    """A job sized to the free slots (most of them: one node; some, several nodes)."""
    job = data.draw(jobs("j"))
    room = [free[n.name] for n in eligible(nodes, job)]
    widest, total = max(room, default=0), sum(room)
    if spanning and total > widest + 1:
        slots = data.draw(st.integers(max(widest + 1, total // 3 if wide else 0), total))
    else:
        slots = data.draw(st.integers(1, max(1, total + 1)))
    return JobRequest(**{**_fields(job), "id": job.id, "slots": slots})


@EXAMPLES
@given(loaded(), st.data(), st.randoms(use_true_random=False))
def test_a_placement_is_the_best_choice_brute_force_finds(world, data, rnd: random.Random) -> None:
    """Gang, fewest nodes, labels, fabric, degraded links and speed: exactly the optimum."""
    nodes, links, holding = world
    free, fabric = use(nodes, holding)
    job = sized(data, nodes, free, spanning=data.draw(st.booleans()))
    assert all(v >= 0 for v in free.values())  # earlier placements never over-committed
    assert all(v >= -TOLERANCE for v in fabric.values())
    topology = Topology(nodes, links)
    for r in holding:
        topology.hold(r.id, r.placement, r.bandwidth_floor_bps)  # type: ignore[arg-type]
    found = topology.place_job(job)
    k, fit = choices(job, nodes, free, fabric)
    if not isinstance(found, Placement):
        event(f"waits: {found}")
        assert k is None  # all or nothing: it waits only when no choice holds every rank
        has_label = bool(eligible(nodes, job))
        assert (found is WaitCode.NODE_SELECTOR) == (not has_label)
        return
    event(f"{len(found.parts)} node(s)")
    assert found.world_size == job.slots
    assert len(found.parts) == k
    by_name = {n.name: n for n in nodes}
    for part in found.parts:
        assert part.count <= free[part.node]
        assert by_name[part.node] in eligible(nodes, job)
        if found.spans:
            assert fabric[part.node] + 1e-6 >= job.bandwidth_floor_bps
    if k == 1:
        tightest = min(fit, key=lambda c: (free[c[0]], c[0]))
        assert found.nodes == tightest
        return
    # Up to 7 nodes there are at most C(7, 3) = 35 choices: placement compares them all.
    best = min(fit, key=lambda c: score(c, by_name, linkmap(links), free, job.slots))
    assert sorted(found.nodes) == sorted(best)
    chosen = score(found.nodes, by_name, linkmap(links), free, job.slots)
    if any(score(c, by_name, linkmap(links), free, job.slots)[0] == 0 for c in fit):
        assert chosen[0] == 0  # a degraded link only when every choice has one
    # Deterministic: the same answer whatever order nodes and links come in.
    shuffled = Topology(rnd.sample(nodes, len(nodes)), rnd.sample(links, len(links)))
    for r in rnd.sample(holding, len(holding)):
        shuffled.hold(r.id, r.placement, r.bandwidth_floor_bps)  # type: ignore[arg-type]
    assert shuffled.place_job(job) == found


@EXAMPLES
@given(loaded(low=9, high=16), st.data())
def test_the_local_search_keeps_the_fewest_nodes_and_no_swap_improves_its_choice(
    world, data
) -> None:
    """Above EXACT_LIMIT choices placement swaps instead of comparing them all (forced here on
    clusters of 9-16 nodes): still the fewest nodes, and a local optimum of rule 4's order, so
    a degraded link stays only when no single swap can drop it."""
    nodes, links, holding = world
    free, fabric = use(nodes, holding)
    job = sized(data, nodes, free, spanning=True, wide=True)
    topology = Topology(nodes, links)
    for r in holding:
        topology.hold(r.id, r.placement, r.bandwidth_floor_bps)  # type: ignore[arg-type]
    with mock.patch.object(placement, "EXACT_LIMIT", 0):
        found = topology.place_job(job)
    k, fit = choices(job, nodes, free, fabric)
    if not isinstance(found, Placement):
        assert k is None
        return
    assert len(found.parts) == k
    event(f"{k} node(s)")
    if k == 1:
        return
    by_name, lm = {n.name: n for n in nodes}, linkmap(links)
    chosen = score(found.nodes, by_name, lm, free, job.slots)
    pool = {n for c in fit for n in c}
    assert len(pool) <= placement.SWAP_POOL  # so every swap below was open to the search
    for i in range(len(found.nodes)):
        for into in pool - set(found.nodes):
            trial = (*found.nodes[:i], into, *found.nodes[i + 1 :])
            if sum(free[n] for n in trial) >= job.slots:
                assert score(trial, by_name, lm, free, job.slots) >= chosen


# --- properties of decisions on a cluster with nodes -----------------------------------------

# Small quotas in one cohort: borrowing, reclaims and priority preemptions all happen.
TENANTS = [
    TenantQuota(name="t", nominal_slots=8, nominal_bandwidth_bps=10 * GBIT, cohort="lab"),
    TenantQuota(name="u", nominal_slots=6, nominal_bandwidth_bps=4 * GBIT, cohort="lab"),
]


def pending_jobs(prefix: str) -> st.SearchStrategy[list[JobRequest]]:
    one = st.builds(
        JobRequest,
        id=st.just(""),
        tenant=st.sampled_from(["t", "u"]),
        slots=st.integers(1, 10),
        submit_time=st.integers(0, 5).map(float),
        priority=st.sampled_from([100, 200, 300]),
        bandwidth_floor_bps=st.sampled_from([0.0, 0.5 * GBIT, GBIT]),
        node_selector=st.sampled_from(LABELS),
    )
    return st.lists(one, max_size=8).map(
        lambda js: [JobRequest(**{**_fields(j), "id": f"{prefix}{i}"}) for i, j in enumerate(js)]
    )


def check_holding(cluster: Cluster, holding: Sequence[RunningJob], allocations: dict) -> None:
    """No node over its slots, its reserved floors or, for spanning jobs, its fabric."""
    free, fabric = use(cluster.nodes, holding)
    assert all(v >= 0 for v in free.values()), free
    assert all(v >= -TOLERANCE for v in fabric.values()), fabric
    carried = dict.fromkeys(free, 0.0)
    for job in holding:
        assert job.placement is not None and job.placement.world_size == job.slots
        if job.placement.spans:
            for node in job.placement.nodes:
                carried[node] += allocations[job.id].bps
    by_name = {n.name: n for n in cluster.nodes}
    for node, bps in carried.items():
        assert bps <= by_name[node].fabric_bps * (1 + 1e-9) + TOLERANCE, (node, bps)


@EXAMPLES
@given(node_lists(2, 6), st.data())
def test_decisions_never_overcommit_a_node_and_incremental_equals_from_scratch(
    nodes: list[Node], data: st.DataObject
) -> None:
    links = data.draw(link_lists(nodes))
    cluster = Cluster.from_nodes(nodes, links)
    queues = Queues(cluster, TENANTS)
    for round_ in range(4):
        now = 10.0 * round_
        for job in data.draw(pending_jobs(f"r{round_}-")):
            queues.submit(job, now)
        snap = Snapshot(
            cluster=cluster,
            tenants=TENANTS,
            pending=[j for q in queues.queues.values() for j in q.jobs()],
            running=list(queues.running.values()),
        )
        expected = schedule(snap, now)
        outcome = queues.decide(now)
        assert sorted((a.job_id, a.placement.to_json()) for a in outcome.admissions) == sorted(  # type: ignore[union-attr]
            (a.job_id, a.placement.to_json())
            for a in expected.admissions  # type: ignore[union-attr]
        )
        assert sorted(v.id for v in outcome.victims) == sorted(
            p.job_id for p in expected.preemptions
        )
        for admission in expected.admissions:
            assert admission.placement is not None
            for part in admission.placement.parts:
                node = next(n for n in nodes if n.name == part.node)
                assert node.schedulable
                assert all(
                    node.labels.get(k) == v
                    for k, v in (snap_job(snap, admission.job_id).node_selector or {}).items()
                )
        check_holding(cluster, list(queues.running.values()), expected.allocations)
        event("preempted" if outcome.victims else "no preemption")
        ending = (
            data.draw(st.sets(st.sampled_from(sorted(queues.running)))) if queues.running else ()
        )
        for job_id in sorted(ending):
            queues.release(job_id)


def snap_job(snap: Snapshot, job_id: str) -> JobRequest:
    return next(j for j in snap.pending if j.id == job_id)
