"""Properties the scheduler keeps whatever the quotas, cohorts and jobs (hypothesis).

Each example builds a reachable state (a first decision over an empty cluster, applied), then
checks a second decision and further rounds against invariants computed here, independently of
the scheduler's own bookkeeping (the queue-order property reuses the ledger's fit check).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from hypothesis import event, given, settings
from hypothesis import strategies as st

from controlplane.scheduling import (
    Cluster,
    Decision,
    JobRequest,
    RunningJob,
    Snapshot,
    TenantQuota,
    WaitCode,
    allocate,
    over_quota,
    schedule,
    water_fill,
)
from controlplane.scheduling.admission import queue_order
from controlplane.scheduling.quota import Ledger

from .factories import apply
from .strategies import GBIT, clusters, job_lists, tenant_lists

# 50 keeps the suite fast; SCHEDULING_EXAMPLES=1000 for a thorough run (passes, ~3 min).
EXAMPLES = settings(max_examples=int(os.environ.get("SCHEDULING_EXAMPLES", "50")), deadline=None)
TOLERANCE = 1e-6  # bit/s, absolute


def at_most(value: float, bound: float) -> bool:
    """value <= bound up to float rounding (a billionth: a few bit/s at Gbit/s)."""
    return value <= bound + 1e-9 * abs(bound) + TOLERANCE


World = tuple[Cluster, list[TenantQuota], list[RunningJob], list[JobRequest]]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """A cluster, tenants, running jobs reached by one applied decision, and new pending jobs."""
    cluster = draw(clusters)
    tenants = draw(tenant_lists())
    first = draw(job_lists(tenants, "a"))
    decision = schedule(Snapshot(cluster=cluster, tenants=tenants, pending=first, running=[]), 0.0)
    leftover, holding = apply(decision, first, [], 0.0)
    return cluster, tenants, holding, leftover + draw(job_lists(tenants, "b"))


def decide(
    cluster: Cluster,
    tenants: Sequence[TenantQuota],
    holding: Sequence[RunningJob],
    pending: Sequence[JobRequest],
    now: float = 10.0,
) -> Decision:
    return schedule(
        Snapshot(cluster=cluster, tenants=tenants, pending=pending, running=holding), now
    )


def holding_after(
    decision: Decision, holding: Sequence[JobRequest], pending: Sequence[JobRequest]
) -> list[JobRequest]:
    gone = {p.job_id for p in decision.preemptions}
    started = {a.job_id for a in decision.admissions}
    return [j for j in holding if j.id not in gone] + [j for j in pending if j.id in started]


def limit(value: float | None) -> float:
    return math.inf if value is None else value


def assert_within_quota(
    cluster: Cluster, tenants: Sequence[TenantQuota], jobs: Sequence[JobRequest]
) -> None:
    used: dict[str, list[float]] = {t.name: [0.0, 0.0] for t in tenants}
    for job in jobs:
        assert job.tenant in used, f"job {job.id} of a tenant without quota holds slots"
        used[job.tenant][0] += job.slots
        used[job.tenant][1] += job.bandwidth_floor_bps
    assert sum(u[0] for u in used.values()) <= cluster.slots
    assert at_most(sum(u[1] for u in used.values()), cluster.fabric_bps)
    borrowed: dict[str, float] = {}
    lendable: dict[str, float] = {}
    for quota in tenants:
        slots, floors = used[quota.name]
        nominal = quota.nominal_slots
        allowed = nominal + (limit(quota.borrowing_limit_slots) if quota.cohort else 0)
        assert slots <= allowed, f"{quota.name} holds {slots} slots > {allowed}"
        # floors come from the tenant's own nominal bandwidth, never from the cohort
        assert at_most(floors, quota.nominal_bandwidth_bps), f"{quota.name} floors {floors}"
        if quota.cohort is not None:
            idle = min(limit(quota.lending_limit_slots), max(0, nominal - slots))
            borrowed[quota.cohort] = borrowed.get(quota.cohort, 0.0) + max(0, slots - nominal)
            lendable[quota.cohort] = lendable.get(quota.cohort, 0.0) + idle
    for cohort, b in borrowed.items():
        assert b <= lendable[cohort], f"cohort {cohort} borrows {b} slots, lends {lendable[cohort]}"


@EXAMPLES
@given(worlds())
def test_no_tenant_ever_exceeds_its_nominal_quota_plus_allowed_borrowing(world: World) -> None:
    cluster, tenants, holding, pending = world
    assert_within_quota(cluster, tenants, holding)
    decision = decide(cluster, tenants, holding, pending)
    assert_within_quota(cluster, tenants, holding_after(decision, holding, pending))


@EXAMPLES
@given(worlds())
def test_every_pending_job_is_either_admitted_or_waiting_with_a_position(world: World) -> None:
    cluster, tenants, holding, pending = world
    decision = decide(cluster, tenants, holding, pending)
    admitted = {a.job_id for a in decision.admissions}
    assert admitted.isdisjoint(decision.waiting)
    assert admitted | set(decision.waiting) == {j.id for j in pending}
    for w in decision.waiting.values():
        assert 1 <= w.position <= w.queue_length
        assert w.reason.startswith("waiting: ")
        assert w.reason.endswith(f"; position {w.position} of {w.queue_length}")
    victims = [p.job_id for p in decision.preemptions]
    assert len(victims) == len(set(victims)) and set(victims) <= {r.id for r in holding}
    assert sorted(victims) == sorted(v for a in decision.admissions for v in a.preempts)


@EXAMPLES
@given(worlds())
def test_allocations_stay_within_the_fabric_ceilings_and_meet_every_floor(world: World) -> None:
    cluster, tenants, holding, pending = world
    decision = decide(cluster, tenants, holding, pending)
    after = holding_after(decision, holding, pending)
    assert set(decision.allocations) == {j.id for j in after}
    assert at_most(sum(a.bps for a in decision.allocations.values()), cluster.fabric_bps)
    for job in after:
        allocation = decision.allocations[job.id]
        assert allocation.floor_met
        assert at_most(job.bandwidth_floor_bps, allocation.bps)
        if job.bandwidth_ceiling_bps is not None:
            assert at_most(allocation.bps, job.bandwidth_ceiling_bps)
    assert_allocations_within_bandwidth_quota(tenants, after, decision)


def assert_allocations_within_bandwidth_quota(
    tenants: Sequence[TenantQuota], jobs: Sequence[JobRequest], decision: Decision
) -> None:
    """No tenant gets more than nominal + borrowing limit (or its floors, if more), and a
    cohort's members get above nominal no more than the others leave idle (lending limits)."""
    got = {t.name: 0.0 for t in tenants}
    floors = {t.name: 0.0 for t in tenants}
    for job in jobs:
        got[job.tenant] += decision.allocations[job.id].bps
        floors[job.tenant] += job.bandwidth_floor_bps
    above: dict[str, float] = {}
    idle: dict[str, float] = {}
    for t in tenants:
        nominal = t.nominal_bandwidth_bps
        allowed = nominal + (limit(t.borrowing_limit_bps) if t.cohort else 0.0)
        assert at_most(got[t.name], max(floors[t.name], allowed))
        if t.cohort is not None:
            above[t.cohort] = above.get(t.cohort, 0.0) + max(0.0, got[t.name] - nominal)
            lend = min(limit(t.lending_limit_bps), max(0.0, nominal - got[t.name]))
            # a billionth of the nominal: sums of float allocations round by a few bit/s
            idle[t.cohort] = idle.get(t.cohort, 0.0) + lend + 1e-9 * nominal
    for cohort, borrowed in above.items():
        assert at_most(borrowed, idle[cohort]), f"cohort {cohort} over-lends bandwidth"


@EXAMPLES
@given(worlds())
def test_no_job_is_admitted_ahead_of_a_more_urgent_job_of_its_queue_that_fits(world: World) -> None:
    """For an admitted job L and a job H waiting ahead of it in the same queue, H must not fit
    even with L not admitted (victims counted as still running, which only makes fitting
    easier for H than when its turn came)."""
    cluster, tenants, holding, pending = world
    decision = decide(cluster, tenants, holding, pending)
    by_id = {j.id: j for j in pending}
    admitted = [by_id[a.job_id] for a in decision.admissions]
    for low in admitted:
        ahead = [
            by_id[w.job_id]
            for w in decision.waiting.values()
            if w.tenant == low.tenant and queue_order(by_id[w.job_id]) < queue_order(low)
        ]
        if not ahead:
            continue
        ledger = Ledger(cluster, tenants)
        for job in [*holding, *admitted]:
            if job is not low:
                ledger.add(job)
        for high in ahead:
            assert decision.waiting[high.id].code is not WaitCode.BLOCKED_BY_HEAD
            assert ledger.check(high) is not None, f"{high.id} fits but {low.id} went first"


@EXAMPLES
@given(worlds(), st.data())
def test_two_jobs_never_preempt_each_other(world: World, data: st.DataObject) -> None:
    cluster, tenants, holding, pending = world
    pairs: set[tuple[str | None, str]] = set()
    for round_ in range(1, 5):
        now = 10.0 * round_
        decision = decide(cluster, tenants, holding, pending, now)
        event("reclaim" if any(p.reclaim for p in decision.preemptions) else "no reclaim")
        for p in decision.preemptions:
            assert (p.job_id, p.by_job_id) not in pairs, f"{p.job_id} and {p.by_job_id} loop"
            pairs.add((p.by_job_id, p.job_id))
        pending, holding = apply(decision, pending, holding, now)
        done = data.draw(
            st.sets(st.sampled_from([r.id for r in holding])) if holding else st.just(set())
        )
        holding = [r for r in holding if r.id not in done]
        pending += data.draw(job_lists(tenants, f"r{round_}-", max_size=5))


@EXAMPLES
@given(
    st.lists(st.tuples(st.integers(0, 4), st.none() | st.integers(0, 12)), min_size=1, max_size=12),
    st.integers(0, 40),
)
def test_allocation_is_max_min_fair_among_equal_weights(
    specs: list[tuple[int, int | None]], fabric_halves: int
) -> None:
    """Same priority, no deadlines, one tenant whose quota is the fabric: every job gets
    clamp(level, floor, ceiling) for one level, and nothing is left idle that a job could use."""
    fabric = fabric_halves * GBIT / 2
    floors_fit = []
    left = fabric
    for floor_halves, _ in specs:
        floor = floor_halves * GBIT / 2
        floors_fit.append(floor if floor <= left else 0.0)
        left -= floors_fit[-1]
    jobs = [
        RunningJob(
            id=f"j{i}",
            tenant="t",
            slots=1,
            submit_time=0,
            started_at=0,
            bandwidth_floor_bps=floor,
            bandwidth_ceiling_bps=None if extra is None else floor + extra * GBIT / 2,
        )
        for i, (floor, (_, extra)) in enumerate(zip(floors_fit, specs, strict=True))
    ]
    quota = TenantQuota(name="t", nominal_slots=64, nominal_bandwidth_bps=fabric)
    plan = allocate(
        cluster=Cluster(slots=64, fabric_bps=fabric), tenants=[quota], running=jobs, now=0
    )
    got = {j.id: plan[j.id].bps for j in jobs}
    caps = {
        j.id: fabric if j.bandwidth_ceiling_bps is None else min(fabric, j.bandwidth_ceiling_bps)
        for j in jobs
    }
    floors = {j.id: j.bandwidth_floor_bps for j in jobs}
    total = sum(got.values())
    assert at_most(total, fabric)
    assert math.isclose(total, min(fabric, sum(caps.values())), rel_tol=1e-9, abs_tol=TOLERANCE)
    for a in got:
        for b in got:
            # a has less than b: a is capped, or b sits at its floor above the level
            if not at_most(got[b], got[a]):
                assert at_most(caps[a], got[a]) or at_most(got[b], floors[b])


@EXAMPLES
@given(clusters, tenant_lists().flatmap(lambda ts: st.tuples(st.just(ts), job_lists(ts, "x", 20))))
def test_enforcing_lowered_quotas_brings_every_tenant_back_within_quota(
    cluster: Cluster, drawn: tuple[list[TenantQuota], list[JobRequest]]
) -> None:
    tenants, jobs = drawn
    holding = [j.started(float(i)) for i, j in enumerate(jobs)]
    snap = Snapshot(cluster=cluster, tenants=tenants, pending=[], running=holding)
    gone = {p.job_id for p in over_quota(snap)}
    assert_within_quota(cluster, tenants, [j for j in holding if j.id not in gone])


@EXAMPLES
@given(
    st.lists(
        st.tuples(st.integers(1, 8), st.integers(0, 10), st.integers(0, 10)),
        min_size=1,
        max_size=10,
    ),
    st.integers(0, 150),
)
def test_water_filling_is_weighted_max_min_fair(
    specs: list[tuple[int, int, int]], total: int
) -> None:
    weights = [float(w) for w, _, _ in specs]
    floors = [float(f) for _, f, _ in specs]
    caps = [float(f + extra) for _, f, extra in specs]
    shares = water_fill(weights, floors, caps, float(total))
    expected = min(max(float(total), sum(floors)), sum(caps))
    assert math.isclose(sum(shares), expected, rel_tol=1e-9, abs_tol=1e-9)
    for i, share_i in enumerate(shares):
        assert floors[i] - 1e-9 <= share_i <= caps[i] + 1e-9
        for j, share_j in enumerate(shares):
            # i has less per unit of weight than j: i is capped, or j sits at its floor
            if share_i / weights[i] < share_j / weights[j] - 1e-9:
                assert share_i >= caps[i] - 1e-9 or share_j <= floors[j] + 1e-9
