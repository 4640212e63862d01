"""Admission: queue order, quotas, cohort borrowing, fair share, queue policies, reasons."""

from __future__ import annotations

import pytest

from controlplane.scheduling import JobRequest, PriorityClass, QueuePolicy, WaitCode

from .factories import GBIT, admitted_ids, decide, job, running, tenant

HIGH, LOW = PriorityClass.HIGH, PriorityClass.LOW


def test_it_admits_a_job_that_fits_within_the_tenant_quota() -> None:
    decision = decide([tenant("vision", slots=8)], [job("a", "vision", slots=4)])
    assert admitted_ids(decision) == ["a"]
    assert decision.admissions[0].reason == "admitted: tenant vision at 4/8 slots"
    assert decision.waiting == {}


def test_it_admits_a_queue_by_priority_then_submit_time() -> None:
    pending = [
        job("late-low", "vision", slots=2, submit=3, priority=LOW),
        job("late-high", "vision", slots=2, submit=2, priority=HIGH),
        job("early-high", "vision", slots=2, submit=1, priority=HIGH),
    ]
    decision = decide([tenant("vision", slots=4)], pending)
    assert admitted_ids(decision) == ["early-high", "late-high"]
    assert decision.waiting["late-low"].code is WaitCode.TENANT_SLOTS


def test_it_explains_a_wait_with_the_tenant_use_and_the_queue_position() -> None:
    pending = [job(f"j{i}", "vision", slots=4, submit=i) for i in range(7)]
    decision = decide([tenant("vision", slots=8)], pending)
    third = decision.waiting["j4"]
    assert (third.position, third.queue_length) == (3, 5)
    assert third.reason == "waiting: tenant vision at 8/8 slots, needs 4; position 3 of 5"


def test_it_lets_a_tenant_borrow_the_idle_quota_of_its_cohort() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    decision = decide(tenants, [job("big", "vision", slots=6)])
    assert admitted_ids(decision) == ["big"]
    assert decision.admissions[0].borrowed_slots == 2
    assert "borrowing 2 from cohort lab" in decision.admissions[0].reason
    assert decision.usage["vision"].slots_borrowed == 2


def test_it_stops_borrowing_at_the_borrowing_limit() -> None:
    tenants = [
        tenant("vision", slots=4, cohort="lab", borrowing_limit_slots=1),
        tenant("nlp", slots=4, cohort="lab"),
    ]
    decision = decide(tenants, [job("a", "vision", slots=4), job("b", "vision", slots=2)])
    assert admitted_ids(decision) == ["a"]
    assert decision.waiting["b"].code is WaitCode.COHORT_SLOTS


def test_it_lends_no_more_than_the_lending_limit() -> None:
    tenants = [
        tenant("vision", slots=4, cohort="lab"),
        tenant("nlp", slots=4, cohort="lab", lending_limit_slots=1),
    ]
    decision = decide(tenants, [job("a", "vision", slots=6), job("b", "vision", slots=5)])
    assert admitted_ids(decision) == ["b"]
    assert decision.waiting["a"].code is WaitCode.TOO_LARGE


def test_it_lends_only_idle_quota() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    decision = decide(tenants, [job("a", "vision", slots=6)], [running("n", "nlp", slots=3)])
    assert decision.waiting["a"].code is WaitCode.COHORT_SLOTS
    assert "cohort lab can lend 1" in decision.waiting["a"].reason


def test_it_never_borrows_without_a_cohort() -> None:
    decision = decide([tenant("vision", slots=4), tenant("nlp", slots=4)], [job("a", "vision", 5)])
    assert decision.waiting["a"].code is WaitCode.TOO_LARGE


def test_it_keeps_a_job_waiting_when_the_cluster_is_full() -> None:
    tenants = [tenant("vision", slots=8), tenant("nlp", slots=8)]
    decision = decide(tenants, [job("a", "vision", 4)], [running("n", "nlp", 8)], slots=10)
    assert decision.waiting["a"].code is WaitCode.CLUSTER_SLOTS
    assert decision.waiting["a"].reason.startswith("waiting: cluster at 8/10 slots, needs 4")


def test_it_blocks_a_strict_fifo_queue_behind_a_head_that_does_not_fit() -> None:
    quota = tenant("vision", slots=4, queue_policy=QueuePolicy.STRICT_FIFO)
    pending = [job("head", "vision", 3, submit=1), job("small", "vision", 1, submit=2)]
    decision = decide([quota], pending, [running("r", "vision", 2)])
    assert admitted_ids(decision) == []
    assert decision.waiting["small"].code is WaitCode.BLOCKED_BY_HEAD
    assert "behind the head of tenant vision's StrictFIFO queue" in decision.waiting["small"].reason


def test_it_lets_smaller_jobs_pass_in_a_best_effort_fifo_queue() -> None:
    pending = [job("head", "vision", 3, submit=1), job("small", "vision", 1, submit=2)]
    decision = decide([tenant("vision", slots=4)], pending, [running("r", "vision", 2)])
    assert admitted_ids(decision) == ["small"]
    assert decision.waiting["head"].position == 1


def test_it_admits_a_job_only_if_its_bandwidth_floor_can_be_guaranteed() -> None:
    pending = [
        job("a", "vision", bandwidth_floor_bps=6 * GBIT, submit=1),
        job("b", "vision", bandwidth_floor_bps=6 * GBIT, submit=2),
    ]
    decision = decide([tenant("vision", gbps=10)], pending)
    assert admitted_ids(decision) == ["a"]
    assert decision.waiting["b"].code is WaitCode.TENANT_BANDWIDTH
    assert "floor 6 Gbit/s cannot be guaranteed" in decision.waiting["b"].reason


def test_it_keeps_floors_within_the_fabric() -> None:
    tenants = [tenant("vision", gbps=10), tenant("nlp", gbps=10)]
    pending = [job("a", "vision", bandwidth_floor_bps=4 * GBIT)]
    decision = decide(
        tenants, pending, [running("n", "nlp", bandwidth_floor_bps=8 * GBIT)], fabric_gbps=10
    )
    assert decision.waiting["a"].code is WaitCode.CLUSTER_BANDWIDTH


def test_it_enforces_the_tenant_limit_on_running_jobs() -> None:
    pending = [job("a", "vision", submit=1), job("b", "vision", submit=2)]
    decision = decide([tenant("vision", max_running_jobs=2)], pending, [running("r", "vision")])
    assert admitted_ids(decision) == ["a"]
    assert decision.waiting["b"].reason.startswith("waiting: tenant vision runs 2/2 jobs")


def test_it_serves_the_tenant_with_the_lowest_dominant_share_first() -> None:
    tenants = [tenant("vision", slots=8), tenant("nlp", slots=8)]
    pending = [job("v", "vision", 4, submit=1), job("n", "nlp", 4, submit=2)]
    decision = decide(tenants, pending, [running("busy", "vision", 4)], slots=8)
    assert admitted_ids(decision) == ["n"]


def test_it_shares_contended_capacity_by_fair_share_weight() -> None:
    tenants = [tenant("heavy", slots=64, weight=2.0), tenant("light", slots=64)]
    pending = [job(f"h{i}", "heavy", submit=i) for i in range(40)]
    pending += [job(f"l{i}", "light", submit=i) for i in range(40)]
    decision = decide(tenants, pending, slots=30)
    assert decision.usage["heavy"].slots_used == 20
    assert decision.usage["light"].slots_used == 10


def test_it_serves_tenants_within_quota_before_borrowers() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    pending = [job("v", "vision", 2, submit=1), job("n", "nlp", 2, submit=2)]
    decision = decide(tenants, pending, [running("busy", "vision", 5)], slots=9)
    assert admitted_ids(decision) == ["n"]


def test_it_calls_a_job_that_can_never_fit_too_large() -> None:
    decision = decide([tenant("vision", slots=128)], [job("huge", "vision", 100)], slots=64)
    assert decision.waiting["huge"].code is WaitCode.TOO_LARGE


def test_it_treats_a_tenant_without_a_quota_as_zero_quota() -> None:
    decision = decide([], [job("a", "ghost")])
    assert decision.waiting["a"].code is WaitCode.TOO_LARGE
    assert decision.usage["ghost"].waiting_jobs == 1


def test_it_refuses_a_snapshot_with_a_job_id_twice() -> None:
    with pytest.raises(ValueError, match="appears more than once"):
        decide([tenant("vision")], [job("a", "vision")], [running("a", "vision")])


def test_it_refuses_a_floor_above_the_ceiling() -> None:
    with pytest.raises(ValueError, match="ceiling must be >= floor"):
        JobRequest(
            id="a",
            tenant="t",
            slots=1,
            submit_time=0,
            bandwidth_floor_bps=2.0,
            bandwidth_ceiling_bps=1.0,
        )


def test_it_reports_usage_for_every_tenant() -> None:
    tenants = [tenant("vision", slots=8, gbps=10), tenant("idle")]
    decision = decide(tenants, [job("a", "vision", 3, bandwidth_floor_bps=GBIT)])
    usage = decision.usage["vision"]
    assert (usage.slots_used, usage.running_jobs, usage.floor_bps_reserved) == (3, 1, GBIT)
    assert usage.bandwidth_bps == pytest.approx(10 * GBIT)
    assert decision.usage["idle"].slots_used == 0


def test_it_reserves_floors_from_the_tenant_own_bandwidth_never_from_the_cohort() -> None:
    tenants = [tenant("vision", gbps=1, cohort="lab"), tenant("nlp", gbps=10, cohort="lab")]
    decision = decide(tenants, [job("a", "vision", bandwidth_floor_bps=2 * GBIT)])
    assert decision.waiting["a"].code is WaitCode.TOO_LARGE


def test_it_says_what_a_job_too_large_for_ever_needs() -> None:
    decision = decide([tenant("vision", slots=128)], [job("huge", "vision", 100)], slots=64)
    assert decision.waiting["huge"].reason == (
        "waiting: needs 100 slots, more than tenant vision can ever hold "
        "(cluster: 64 slots, 100 Gbit/s); position 1 of 1"
    )


def test_it_refuses_a_snapshot_with_a_tenant_twice() -> None:
    with pytest.raises(ValueError, match="tenant appears more than once"):
        decide([tenant("vision"), tenant("vision", slots=2)], [job("a", "vision")])


def test_it_serves_a_tenant_by_its_share_after_a_reclaim_lowered_it() -> None:
    """vision reclaims nlp's newest job; nlp then borrows nothing and goes before speech, which
    still borrows, for the last two free slots."""
    tenants = [tenant(name, slots=4, cohort="lab") for name in ("vision", "nlp", "speech", "idle")]
    holding = [
        running("n-old", "nlp", 4, started=1),
        running("n-new", "nlp", 4, started=3),
        running("s-old", "speech", 6, started=2),
    ]
    pending = [job("v", "vision", 4), job("n", "nlp", 2), job("s", "speech", 2)]
    decision = decide(tenants, pending, holding, slots=16)
    assert [p.job_id for p in decision.preemptions] == ["n-new"]
    assert admitted_ids(decision) == ["v", "n"]
    assert decision.waiting["s"].reason.startswith(
        "waiting: tenant speech at 6/4 slots, needs 2; cohort lab can lend 0"
    )
