"""Preemption: priority within a tenant, reclaim within a cohort, victim choice, no loops."""

from __future__ import annotations

from controlplane.scheduling import (
    Cluster,
    Decision,
    Options,
    PreemptionPolicy,
    PriorityClass,
    RunningJob,
    Snapshot,
    TenantQuota,
    WaitCode,
    over_quota,
)

from .factories import admitted_ids, apply, decide, job, running, tenant

LOW, NORMAL = PriorityClass.LOW, PriorityClass.NORMAL
HIGH, CRITICAL = PriorityClass.HIGH, PriorityClass.CRITICAL


def victims(decision: Decision) -> list[str]:
    return [p.job_id for p in decision.preemptions]


def test_it_lets_a_critical_job_preempt_a_low_job_of_a_full_tenant() -> None:
    full = [running("low", "vision", 4, priority=LOW), running("mid", "vision", 4, started=1)]
    decision = decide(
        [tenant("vision", slots=8)], [job("urgent", "vision", 4, priority=CRITICAL)], full
    )
    assert admitted_ids(decision) == ["urgent"]
    assert decision.admissions[0].preempts == ("low",)
    (preemption,) = decision.preemptions
    assert (preemption.job_id, preemption.by_job_id, preemption.reclaim) == ("low", "urgent", False)
    assert preemption.reason == (
        "preempted: job urgent (critical) of tenant vision needs the room; this job is low"
    )
    assert "low" not in decision.allocations
    assert "urgent" in decision.allocations


def test_it_never_preempts_a_job_of_equal_or_higher_priority_in_the_same_tenant() -> None:
    full = [running("a", "vision", 4, priority=HIGH), running("b", "vision", 4, priority=HIGH)]
    decision = decide([tenant("vision", slots=8)], [job("c", "vision", 4, priority=HIGH)], full)
    assert victims(decision) == []
    assert decision.waiting["c"].code is WaitCode.TENANT_SLOTS


def test_it_never_preempts_another_tenant_for_priority_alone() -> None:
    tenants = [tenant("vision", slots=8), tenant("nlp", slots=8)]
    others = [running("n", "nlp", 8, priority=LOW)]
    decision = decide(tenants, [job("v", "vision", 4, priority=CRITICAL)], others, slots=8)
    assert victims(decision) == []
    assert decision.waiting["v"].code is WaitCode.CLUSTER_SLOTS


def test_it_reclaims_lent_slots_from_a_borrowing_cohort_peer() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    borrowers = [running("n1", "nlp", 4, started=1), running("n2", "nlp", 4, started=2)]
    decision = decide(tenants, [job("v", "vision", 4, priority=LOW)], borrowers)
    assert victims(decision) == ["n2"]
    assert decision.preemptions[0].reclaim
    assert "reclaims quota lent to tenant nlp in cohort lab" in decision.preemptions[0].reason


def test_it_reclaims_only_what_the_peer_borrowed() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    borrowers = [running(f"n{i}", "nlp", 1, started=i) for i in range(6)]
    decision = decide(tenants, [job("v", "vision", 4)], borrowers)
    assert sorted(victims(decision)) == ["n4", "n5"]  # the newest two; nlp keeps its 4
    assert decision.usage["nlp"].slots_used == 4


def test_it_does_not_reclaim_for_a_job_that_would_itself_borrow() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    borrowers = [running("n1", "nlp", 8)]
    decision = decide(tenants, [job("v", "vision", 5)], borrowers)
    assert victims(decision) == []


def test_it_picks_the_fewest_victims() -> None:
    full = [
        running("small-new", "vision", 2, priority=LOW, started=5),
        running("big-old", "vision", 6, priority=LOW, started=1),
    ]
    decision = decide([tenant("vision", slots=8)], [job("c", "vision", 6, priority=HIGH)], full)
    assert victims(decision) == ["big-old"]


def test_it_picks_the_lowest_priority_then_the_newest_victim() -> None:
    full = [
        running("normal-new", "vision", 2, priority=NORMAL, started=9),
        running("low-old", "vision", 2, priority=LOW, started=1),
        running("low-new", "vision", 2, priority=LOW, started=2),
        running("low-mid", "vision", 2, priority=LOW, started=1.5),
    ]
    decision = decide([tenant("vision", slots=8)], [job("c", "vision", 2, priority=HIGH)], full)
    assert victims(decision) == ["low-new"]


def test_two_jobs_never_preempt_each_other() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    pending = [job("v", "vision", 4, priority=LOW, submit=5)]
    holding = [running("n", "nlp", 8, priority=CRITICAL)]
    pairs: list[tuple[str | None, str]] = []
    for now in range(10, 60, 10):
        decision = decide(tenants, pending, holding, now=now)
        pairs += [(p.by_job_id, p.job_id) for p in decision.preemptions]
        pending, holding = apply(decision, pending, holding, now)
    assert pairs == [("v", "n")]
    assert decision.waiting["n"].code is WaitCode.COHORT_SLOTS


def snapshot(
    tenants: list[TenantQuota], running_jobs: list[RunningJob], slots: int = 64
) -> Snapshot:
    return Snapshot(
        cluster=Cluster(slots=slots, fabric_bps=100e9),
        tenants=tenants,
        pending=[],
        running=running_jobs,
    )


def test_it_preempts_nothing_to_enforce_quotas_that_are_met() -> None:
    assert over_quota(snapshot([tenant("vision", slots=8)], [running("a", "vision", 8)])) == ()


def test_it_enforces_a_lowered_quota_on_the_lowest_priority_newest_jobs() -> None:
    jobs = [
        running("high", "vision", 4, priority=HIGH, started=9),
        running("low-old", "vision", 2, priority=LOW, started=1),
        running("low-new", "vision", 2, priority=LOW, started=2),
    ]
    taken = over_quota(snapshot([tenant("vision", slots=5)], jobs))
    assert [p.job_id for p in taken] == ["low-new", "low-old"]
    assert taken[0].by_job_id is None
    assert "above its lowered quota" in taken[0].reason


def test_it_enforces_a_lowered_limit_on_running_jobs() -> None:
    jobs = [running(f"j{i}", "vision", started=i) for i in range(3)]
    taken = over_quota(snapshot([tenant("vision", max_running_jobs=1)], jobs))
    assert [p.job_id for p in taken] == ["j2", "j1"]


def test_it_returns_borrowed_quota_a_cohort_can_no_longer_lend() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=2, cohort="lab")]
    jobs = [running("n", "nlp", 2), running("v1", "vision", 4, started=1)]
    jobs += [running("v2", "vision", 2, started=2)]
    assert [p.job_id for p in over_quota(snapshot(tenants, jobs))] == ["v2"]


def test_it_sheds_jobs_when_the_cluster_shrinks() -> None:
    jobs = [running("a", "vision", 4, priority=HIGH), running("b", "nlp", 4, priority=LOW)]
    taken = over_quota(snapshot([tenant("vision"), tenant("nlp")], jobs, slots=6))
    assert [p.job_id for p in taken] == ["b"]


def test_reclaim_takes_a_peer_lower_priority_job_before_its_newest() -> None:
    """As in Kueue: a reclaim takes the peer's lowest priority first (nlp's old low job), not
    its newest (the critical one)."""
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    jobs = [
        running("old-low", "nlp", 4, priority=LOW, started=1),
        running("new-critical", "nlp", 2, priority=CRITICAL, started=5),
    ]
    decision = decide(tenants, [job("v", "vision", 4, priority=LOW)], jobs)
    assert victims(decision) == ["old-low"]


def test_reclaim_among_equal_priorities_takes_the_job_that_loses_least_work() -> None:
    """At t=100, "fresh" checkpointed 2 s ago (every 8 s since t=2); "stale" never does and has
    run 50 s; the newest, "young", has run 10 s without a checkpoint."""
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    jobs = [
        running("base", "nlp", 2, started=0),
        running("stale", "nlp", 2, started=50),
        running("fresh", "nlp", 2, started=2, checkpoint_interval_s=8.0),
        running("young", "nlp", 2, started=90),
    ]
    decision = decide(tenants, [job("v", "vision", 2)], jobs, now=100)
    assert victims(decision) == ["fresh"]
    assert decision.preemptions[0].work_lost_s == 2.0


def test_a_job_admitted_within_the_minimum_run_time_is_not_preempted() -> None:
    full = [running("young", "vision", 8, priority=LOW, started=95)]
    options = Options(min_run_time_s=30)
    decision = decide(
        [tenant("vision")], [job("h", "vision", 8, priority=HIGH)], full, options=options
    )
    assert victims(decision) == []
    assert decision.waiting["h"].code is WaitCode.TENANT_SLOTS


def test_a_critical_job_preempts_even_within_the_minimum_run_time() -> None:
    full = [running("young", "vision", 8, priority=LOW, started=95)]
    options = Options(min_run_time_s=30)
    decision = decide(
        [tenant("vision")], [job("c", "vision", 8, priority=CRITICAL)], full, options=options
    )
    assert victims(decision) == ["young"]


def test_a_job_evicted_k_times_yields_only_to_a_newer_higher_priority_job() -> None:
    worn = running("worn", "vision", 8, priority=LOW, started=50, evictions=3)
    older = job("older", "vision", 8, priority=HIGH, submit=40)
    newer = job("newer", "vision", 8, priority=HIGH, submit=60)
    options = Options(eviction_limit=3)
    assert victims(decide([tenant("vision")], [older], [worn], options=options)) == []
    assert victims(decide([tenant("vision")], [newer], [worn], options=options)) == ["worn"]


def test_a_queue_with_preemption_never_preempts_nothing() -> None:
    quota = tenant("vision", preemption=PreemptionPolicy.NEVER)
    full = [running("low", "vision", 8, priority=LOW)]
    decision = decide([quota], [job("c", "vision", 8, priority=CRITICAL)], full)
    assert victims(decision) == []


def test_lower_or_newer_equal_priority_preempts_a_newer_job_of_equal_priority() -> None:
    full = [running("newer", "vision", 8, started=50)]  # submitted at 50
    waiting = [job("older", "vision", 8, submit=10)]
    plain = decide([tenant("vision")], waiting, full)
    assert victims(plain) == []
    policy = PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
    newer_equal = decide([tenant("vision", preemption=policy)], waiting, full)
    assert victims(newer_equal) == ["newer"]


def test_an_evicted_job_waits_out_its_back_off() -> None:
    options = Options(backoff_base_s=10, backoff_max_s=100)
    again = job("again", "vision", 2, evictions=3, requeued_at=90)  # back at 90 + 10 * 2**2
    early = decide([tenant("vision")], [again], now=100, options=options)
    assert early.waiting["again"].code is WaitCode.BACKOFF
    assert admitted_ids(decide([tenant("vision")], [again], now=130, options=options)) == ["again"]
