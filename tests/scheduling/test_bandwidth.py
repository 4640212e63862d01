"""Bandwidth allocation: floors, water-filling, urgency, tenant quotas and cohort lending."""

from __future__ import annotations

import pytest

from controlplane.scheduling import (
    Cluster,
    JobRequest,
    PriorityClass,
    RunningJob,
    TenantQuota,
    allocate,
    urgency,
    water_fill,
)
from controlplane.scheduling.bandwidth import MAX_URGENCY

from .factories import GBIT, job, running, tenant

LOW, NORMAL, HIGH = PriorityClass.LOW, PriorityClass.NORMAL, PriorityClass.HIGH


def shares(
    jobs: list[RunningJob], tenants: list[TenantQuota], fabric_gbps: float = 10, now: float = 0
) -> dict[str, float]:
    cluster = Cluster(slots=64, fabric_bps=fabric_gbps * GBIT)
    plan = allocate(cluster=cluster, tenants=tenants, running=jobs, now=now)
    return {job_id: a.bps / GBIT for job_id, a in plan.items()}


def test_it_water_fills_up_to_the_caps() -> None:
    assert water_fill([1, 1, 1], [0, 0, 0], [1, 5, 5], 7) == [1, 3, 3]


def test_it_water_fills_in_proportion_to_the_weights() -> None:
    assert water_fill([1, 3], [0, 0], [10, 10], 8) == [2, 6]


def test_it_water_fills_above_the_floors() -> None:
    assert water_fill([1, 1], [4, 0], [10, 10], 6) == [4, 2]


def test_it_splits_the_fabric_equally_among_equal_jobs() -> None:
    jobs = [running(f"j{i}", "vision", started=i) for i in range(4)]
    assert shares(jobs, [tenant("vision", gbps=10)]) == pytest.approx(
        {f"j{i}": 2.5 for i in range(4)}
    )


def test_it_gives_a_higher_priority_a_proportionally_larger_share() -> None:
    jobs = [running("low", "vision", priority=LOW), running("high", "vision", priority=HIGH)]
    assert shares(jobs, [tenant("vision", gbps=8)]) == pytest.approx({"low": 2, "high": 6})


def test_it_never_allocates_above_a_ceiling() -> None:
    jobs = [
        running("capped", "vision", priority=HIGH, bandwidth_ceiling_bps=GBIT),
        running("free", "vision"),
    ]
    assert shares(jobs, [tenant("vision", gbps=10)]) == pytest.approx({"capped": 1, "free": 9})


def test_it_meets_every_floor_even_for_a_low_priority_job() -> None:
    jobs = [
        running("low", "vision", priority=LOW, bandwidth_floor_bps=4 * GBIT),
        running("high", "vision", priority=HIGH),
    ]
    assert shares(jobs, [tenant("vision", gbps=10)]) == pytest.approx({"low": 4, "high": 6})


def test_it_honours_floors_in_priority_order_when_the_fabric_shrinks() -> None:
    jobs = [
        running("low", "vision", priority=LOW, bandwidth_floor_bps=3 * GBIT),
        running("high", "vision", priority=HIGH, bandwidth_floor_bps=3 * GBIT),
    ]
    plan = allocate(
        cluster=Cluster(slots=8, fabric_bps=4 * GBIT),
        tenants=[tenant("vision", gbps=10)],
        running=jobs,
        now=0,
    )
    assert plan["high"].floor_met and not plan["low"].floor_met
    assert plan["high"].bps + plan["low"].bps == pytest.approx(4 * GBIT)


def test_it_keeps_a_tenant_within_its_bandwidth_quota() -> None:
    jobs = [running("v", "vision"), running("n", "nlp")]
    got = shares(jobs, [tenant("vision", gbps=2), tenant("nlp", gbps=3)], fabric_gbps=10)
    assert got == pytest.approx({"v": 2, "n": 3})


def test_it_lends_idle_bandwidth_quota_within_the_cohort() -> None:
    tenants = [tenant("vision", gbps=5, cohort="lab"), tenant("nlp", gbps=5, cohort="lab")]
    got = shares([running("v", "vision")], tenants, fabric_gbps=10)
    assert got == pytest.approx({"v": 10})


def test_it_reclaims_lent_bandwidth_as_soon_as_the_lender_has_demand() -> None:
    tenants = [tenant("vision", gbps=5, cohort="lab"), tenant("nlp", gbps=5, cohort="lab")]
    jobs = [running("v1", "vision"), running("v2", "vision"), running("n", "nlp")]
    assert shares(jobs, tenants, fabric_gbps=10) == pytest.approx({"v1": 2.5, "v2": 2.5, "n": 5})


def test_it_lends_no_more_bandwidth_than_the_lending_limits_allow() -> None:
    tenants = [
        tenant("vision", gbps=5, cohort="lab"),
        tenant("nlp", gbps=5, cohort="lab", lending_limit_bps=1 * GBIT),
        tenant("ml", gbps=5, cohort="lab", lending_limit_bps=0.0),
    ]
    assert shares([running("v", "vision")], tenants, fabric_gbps=20) == pytest.approx({"v": 6})


def test_it_borrows_no_more_bandwidth_than_the_borrowing_limit_allows() -> None:
    tenants = [
        tenant("vision", gbps=5, cohort="lab", borrowing_limit_bps=2 * GBIT),
        tenant("nlp", gbps=5, cohort="lab"),
    ]
    got = shares([running("v", "vision")], tenants, fabric_gbps=20)
    assert got == pytest.approx({"v": 7})


def test_it_weighs_deadline_urgency_into_the_share() -> None:
    late = running("late", "vision", deadline=100, remaining_steps=900, steps_per_second=10)
    relaxed = running("relaxed", "vision")
    plan = allocate(
        cluster=Cluster(slots=8, fabric_bps=10 * GBIT),
        tenants=[tenant("vision", gbps=10)],
        running=[late, relaxed],
        now=10,
    )
    assert plan["late"].urgency == pytest.approx(2.0)
    assert plan["late"].bps == pytest.approx(2 * plan["relaxed"].bps)


def test_its_urgency_is_one_with_time_to_spare() -> None:
    spare = job("a", "t", deadline=1000, remaining_steps=100, steps_per_second=10)
    assert urgency(spare, now=0) == 1.0
    assert urgency(job("b", "t"), now=0) == 1.0


def test_its_urgency_grows_as_the_deadline_nears() -> None:
    def at(now: float) -> float:
        request = JobRequest(
            id="a",
            tenant="t",
            slots=1,
            submit_time=0,
            deadline=100,
            remaining_steps=500,
            steps_per_second=10,
        )
        return urgency(request, now)

    assert at(0) < at(60) < at(80) == MAX_URGENCY
    assert at(150) == MAX_URGENCY


def test_it_cuts_overcommitted_tenant_budgets_by_fair_share_weight() -> None:
    tenants = [tenant("vision", gbps=8), tenant("nlp", gbps=8, weight=3.0)]
    got = shares([running("v", "vision"), running("n", "nlp")], tenants, fabric_gbps=10)
    assert got == pytest.approx({"v": 2.5, "n": 7.5})


def test_it_shares_a_cohort_idle_quota_among_borrowers_by_weight() -> None:
    tenants = [
        tenant("idle", gbps=6, cohort="lab"),
        tenant("vision", gbps=1, cohort="lab"),
        tenant("nlp", gbps=1, cohort="lab", weight=2.0),
    ]
    got = shares([running("v", "vision"), running("n", "nlp")], tenants, fabric_gbps=20)
    assert got == pytest.approx({"v": 1 + 2, "n": 1 + 4})
