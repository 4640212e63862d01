"""Incremental decisions (Queues), the classical admission order, and the properties that must
hold over whole simulated runs: quotas held after every decision, and no job evicted more than
k times while no new higher-priority job arrives."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from controlplane.scheduling import (
    AdmissionOrder,
    Cluster,
    JobRequest,
    Options,
    Queues,
    Snapshot,
    TenantQuota,
    schedule,
    simulate,
)
from controlplane.scheduling.quota import Ledger

from .factories import job, tenant
from .strategies import job_lists, tenant_lists
from .test_properties import assert_within_quota

EXAMPLES = settings(max_examples=int(os.environ.get("SCHEDULING_EXAMPLES", "50")), deadline=None)
CLUSTER = Cluster(slots=64, fabric_bps=100e9)


def test_a_decision_looks_at_one_job_per_equivalence_class_whatever_the_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """10,000 identical jobs that cannot fit: the decision checks the first of them only."""
    queues = Queues(CLUSTER, [tenant("vision", slots=4)])
    for i in range(10_000):
        queues.submit(job(f"j{i}", "vision", 8, submit=i))
    checks = count_checks(monkeypatch)
    queues.decide(0.0)
    assert checks == ["j0"]


def test_a_tenant_nothing_happened_to_is_not_looked_at_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queues = Queues(CLUSTER, [tenant("vision", slots=4), tenant("nlp", slots=4)])
    queues.submit(job("v-big", "vision", 8))
    queues.decide(0.0)
    queues.submit(job("n-small", "nlp", 2))
    checks = count_checks(monkeypatch)
    queues.decide(1.0)
    assert checks == ["n-small"]


def test_a_job_ending_wakes_the_tenants_waiting_on_the_cluster() -> None:
    queues = Queues(Cluster(slots=8, fabric_bps=1e9), [tenant("vision"), tenant("nlp")])
    queues.submit(job("v", "vision", 8))
    assert [j.id for j in queues.decide(0.0).admitted] == ["v"]
    queues.submit(job("n", "nlp", 8))
    assert queues.decide(1.0).admitted == []
    queues.release("v")
    assert [j.id for j in queues.decide(2.0).admitted] == ["n"]


def test_a_job_in_back_off_withdrawn_and_submitted_again_keeps_one_place() -> None:
    """The control plane withdraws a changed job and submits it again as it is now; a job in
    back-off may come back with the same back-off end (and its progress read anew)."""
    options = Options(backoff_base_s=10.0, backoff_max_s=60.0)
    queues = Queues(CLUSTER, [tenant("vision", slots=4)], options)
    evicted = job("j", "vision", 2, evictions=1, requeued_at=0.0)
    queues.submit(evicted, now=1.0)
    queues.withdraw("j", "vision")
    queues.submit(dataclasses.replace(evicted, remaining_steps=5.0), now=1.0)
    assert queues.decide(5.0).admitted == []
    assert [j.id for j in queues.decide(10.0).admitted] == ["j"]
    assert queues.pending_count() == 0


def count_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    checked: list[str] = []
    original = Ledger.check

    def check(self: Ledger, candidate: JobRequest) -> Any:
        checked.append(candidate.id)
        return original(self, candidate)

    monkeypatch.setattr(Ledger, "check", check)
    return checked


def classical(cohort: str = "lab") -> Options:
    return Options(cohort_order={cohort: AdmissionOrder.CLASSICAL})


def test_a_classical_cohort_admits_at_most_one_head_per_queue_per_decision() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    queues = Queues(CLUSTER, tenants, classical())
    for i in range(3):
        queues.submit(job(f"v{i}", "vision", 1, submit=i))
        queues.submit(job(f"n{i}", "nlp", 1, submit=i))
    first = queues.decide(0.0)
    assert sorted(j.id for j in first.admitted) == ["n0", "v0"]
    assert queues.dirty == {"vision", "nlp"}  # both have more: the next decision serves them
    fair = Queues(CLUSTER, tenants)
    for i in range(3):
        fair.submit(job(f"v{i}", "vision", 1, submit=i))
    assert len(fair.decide(0.0).admitted) == 3


def test_a_classical_cohort_serves_heads_that_fit_without_borrowing_first() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab"), tenant("nlp", slots=4, cohort="lab")]
    queues = Queues(Cluster(slots=8, fabric_bps=1e9), tenants, classical())
    queues.submit(job("v-borrows", "vision", 6, submit=0, priority=400))
    queues.submit(job("n-within", "nlp", 4, submit=5, priority=100))
    assert [j.id for j in queues.decide(0.0).admitted] == ["n-within"]


def test_one_shot_reasons_say_when_a_classical_queue_has_used_its_turn() -> None:
    tenants = [tenant("vision", slots=4, cohort="lab")]
    snap = Snapshot(
        cluster=CLUSTER,
        tenants=tenants,
        pending=[job("a", "vision", submit=0), job("b", "vision", submit=1)],
        running=[],
        options=classical(),
    )
    decision = schedule(snap, 0.0)
    assert [a.job_id for a in decision.admissions] == ["a"]
    assert decision.waiting["b"].code == "next_turn"


# --- incremental == from scratch ---------------------------------------------------------------


def from_scratch(
    queues: Queues, tenants: list[TenantQuota], now: float, options: Options | None = None
) -> Any:
    """What schedule() decides over the same jobs as ``queues`` (every tenant looked at)."""
    snap = Snapshot(
        cluster=CLUSTER,
        tenants=tenants,
        pending=[j for q in queues.queues.values() for j in q.jobs()],
        running=list(queues.running.values()),
        options=options or Options(),
    )
    return schedule(snap, now)


def test_a_reclaim_lets_in_a_cohort_peer_that_waited_for_room_beyond_its_quota() -> None:
    """Found by the property below: vision borrows the whole cohort; speech (within its
    quota) and rl (quota 0, so only by borrowing) wait for room. At the next decision speech
    reclaims, and the room it frees lets rl in too, as a decision from scratch admits."""
    tenants = [
        tenant("vision", slots=3, cohort="lab"),
        tenant("speech", slots=4, cohort="lab"),
        tenant("rl", slots=0, cohort="lab"),
    ]
    queues = Queues(CLUSTER, tenants)
    # Ids in this order give vision the first turn among equal shares.
    for job_ in (job("1-v", "vision", 7), job("2-s", "speech", 1), job("3-r", "rl", 1)):
        queues.submit(job_)
    assert [j.id for j in queues.decide(0.0).admitted] == ["1-v"]
    expected = from_scratch(queues, tenants, 10.0)
    outcome = queues.decide(10.0)
    assert sorted(a.job_id for a in expected.admissions) == ["2-s", "3-r"]
    assert sorted(j.id for j in outcome.admitted) == ["2-s", "3-r"]
    assert [v.id for v in outcome.victims] == ["1-v"]


def test_room_a_preemption_frees_mid_decision_reaches_a_peer_whose_turn_comes_later() -> None:
    """Found by the property below: nlp's new high-priority job preempts nlp's own older job
    (its bandwidth quota), which frees cohort room; vision, waiting for that room and served
    after nlp by fair share, gets it in the same decision, as a decision from scratch does."""
    tenants = [
        tenant("vision", slots=4, gbps=0, cohort="lab"),
        tenant("nlp", slots=6, gbps=3, cohort="lab"),
        tenant("speech", slots=1, gbps=0, cohort="lab"),
    ]
    queues = Queues(CLUSTER, tenants)
    queues.submit(job("1-v", "vision", 8))
    queues.submit(job("2-n", "nlp", 3, priority=100, bandwidth_floor_bps=0.5e9))
    assert sorted(j.id for j in queues.decide(0.0).admitted) == ["1-v", "2-n"]
    queues.submit(job("3-v", "vision", 1))
    queues.submit(job("4-v", "vision", 1))
    assert queues.decide(10.0).admitted == []  # the cohort is full
    queues.submit(job("5-n", "nlp", 1, priority=200, bandwidth_floor_bps=3e9))
    expected = from_scratch(queues, tenants, 20.0)
    outcome = queues.decide(20.0)
    assert sorted(a.job_id for a in expected.admissions) == ["3-v", "4-v", "5-n"]
    assert sorted(j.id for j in outcome.admitted) == ["3-v", "4-v", "5-n"]
    assert [v.id for v in outcome.victims] == ["2-n"]


@EXAMPLES
@given(tenant_lists(), st.data())
def test_incremental_decisions_admit_what_a_decision_from_scratch_admits(
    tenants: list[TenantQuota], data: st.DataObject
) -> None:
    """Over rounds of arrivals and job ends, Queues.decide() (dirty tenants only) admits and
    preempts exactly what schedule() over the same state does (every tenant)."""
    options = Options(min_run_time_s=data.draw(st.sampled_from([0.0, 15.0])))
    queues = Queues(CLUSTER, tenants, options)
    for round_ in range(5):
        now = 10.0 * round_
        for arrival in data.draw(job_lists(tenants, f"r{round_}-", max_size=6)):
            queues.submit(arrival, now)
        expected = from_scratch(queues, tenants, now, options)
        outcome = queues.decide(now)
        assert sorted(j.id for j in outcome.admitted) == sorted(
            a.job_id for a in expected.admissions
        )
        assert sorted(v.id for v in outcome.victims) == sorted(
            p.job_id for p in expected.preemptions
        )
        event("preempted" if outcome.victims else "no preemption")
        ending = (
            data.draw(st.sets(st.sampled_from(sorted(queues.running)))) if queues.running else ()
        )
        for job_id in sorted(ending):
            queues.release(job_id)


# --- properties of whole simulated runs --------------------------------------------------------


PRIORITIES = [50, 100, 200, 400]


@st.composite
def traces(draw: st.DrawFn) -> dict[str, Any]:
    """Small contended traces: 2-4 tenants in one or two cohorts, jobs arriving over time."""
    count = draw(st.integers(2, 4))
    tenants = [
        {
            "name": f"t{i}",
            "nominal_slots": draw(st.integers(1, 8)),
            "nominal_mbps": 1000,
            "cohort": draw(st.sampled_from(["a", "a", "b"])),
            "queue_policy": draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
            "preemption": draw(
                st.sampled_from(["LowerPriority", "LowerOrNewerEqualPriority", "Never"])
            ),
        }
        for i in range(count)
    ]
    jobs = [
        {
            "id": f"j{i}",
            "tenant": f"t{draw(st.integers(0, count - 1))}",
            "arrival": draw(st.integers(0, 60)),
            "slots": draw(st.integers(1, 8)),
            "priority": draw(st.sampled_from(PRIORITIES)),
            "duration": draw(st.integers(1, 40)),
            "comm_fraction": 0.0,
            "checkpoint": draw(st.sampled_from([None, 5, 20])),
        }
        for i in range(draw(st.integers(1, 24)))
    ]
    return {
        "cluster": {"slots": draw(st.integers(8, 24)), "fabric_mbps": 10000},
        "tick_s": 7,
        "options": {
            "min_run_time": draw(st.sampled_from([0, 3])),
            "eviction_limit": draw(st.integers(1, 3)),
            "backoff_base": draw(st.sampled_from([0, 2])),
            "cohort_order": {"a": draw(st.sampled_from(["FairShare", "Classical"]))},
        },
        "tenants": tenants,
        "jobs": jobs,
    }


class CheckedSimulation(simulate.Simulation):
    """The simulator, checking quotas after each decision and noting each eviction's time."""

    def __init__(self, trace: simulate.Trace) -> None:
        super().__init__(trace)
        self.evicted_at: dict[str, list[float]] = {}

    def _decide(self) -> None:
        super()._decide()
        holding = list(self.queues.running.values())
        assert_within_quota(self.trace.cluster, self.trace.tenants, holding)

    def _apply(self, outcome: Any) -> None:
        for victim in outcome.victims:
            self.evicted_at.setdefault(victim.id, []).append(self.now)
        super()._apply(outcome)


@EXAMPLES
@given(traces())
def test_quotas_hold_after_every_decision_of_a_run(raw: dict[str, Any]) -> None:
    sim = CheckedSimulation(simulate.load(raw))
    metrics = sim.run()
    event(f"evictions: {'some' if metrics.preemptions else 'none'}")


@EXAMPLES
@given(traces())
def test_no_job_is_evicted_more_than_k_times_while_no_higher_priority_job_arrives(
    raw: dict[str, Any],
) -> None:
    trace = simulate.load(raw)
    sim = CheckedSimulation(trace)
    sim.run()
    k = trace.options.eviction_limit
    for job_id, times in sim.evicted_at.items():
        job_priority = sim.states[job_id].job.priority
        arrivals = [j.arrival for j in trace.jobs if j.priority > job_priority]
        for count in evictions_between_arrivals(times, arrivals):
            assert count <= k, f"{job_id} evicted {count} times with no new higher priority job"
    event(f"most evictions of one job: {max(map(len, sim.evicted_at.values()), default=0)}")


def evictions_between_arrivals(times: Sequence[float], arrivals: Sequence[float]) -> list[int]:
    """Evictions in each interval [a_i, a_i+1) between arrivals (and before the first)."""
    bounds = sorted(set(arrivals))
    counts: dict[int, int] = {}
    for t in times:
        interval = sum(1 for b in bounds if b <= t)
        counts[interval] = counts.get(interval, 0) + 1
    return list(counts.values())


def test_the_eviction_bound_is_not_vacuous() -> None:
    """Without the limit (k very large) the same kind of run does evict one job again and
    again: a reclaim ping-pong between two tenants whose jobs keep arriving at low priority."""
    raw = {
        "cluster": {"slots": 8, "fabric_mbps": 1000},
        "tick_s": 1,
        "tenants": [
            {"name": "a", "nominal_slots": 4, "nominal_mbps": 500, "cohort": "c"},
            {"name": "b", "nominal_slots": 4, "nominal_mbps": 500, "cohort": "c"},
        ],
        "jobs": [
            {
                "id": "long",
                "tenant": "a",
                "arrival": 0,
                "slots": 8,
                "duration": 100,
                "comm_fraction": 0,
                "priority": 100,
            },
        ]
        + [
            {
                "id": f"b{i}",
                "tenant": "b",
                "arrival": 1 + 3 * i,
                "slots": 4,
                "duration": 1,
                "comm_fraction": 0,
                "priority": 100,
            }
            for i in range(10)
        ],
    }
    unlimited = {**raw, "options": {"eviction_limit": 1000}}
    limited = {**raw, "options": {"eviction_limit": 2}}
    assert simulate.run(simulate.load(unlimited)).evictions_per_job["max"] >= 5
    assert simulate.run(simulate.load(limited)).evictions_per_job["max"] == 2
