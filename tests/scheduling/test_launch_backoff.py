"""A job that platform faults sent back from its launch waits out a bounded, doubling back-off."""

from __future__ import annotations

import math

import pytest

from controlplane.scheduling import Cluster, Options, Queues, WaitCode

from .factories import admitted_ids, decide, job, tenant

OPTIONS = Options(launch_backoff_base_s=2, launch_backoff_max_s=60)


def test_the_wait_doubles_with_each_fault_in_a_row_up_to_the_cap() -> None:
    waits = [OPTIONS.launch_backoff_s(n) for n in range(0, 9)]
    assert waits == [0, 2, 4, 8, 16, 32, 60, 60, 60]
    assert OPTIONS.launch_backoff_s(10_000) == 60  # no overflow for a fault that never ends


def test_a_job_whose_launch_failed_three_times_waits_eight_seconds() -> None:
    again = job("again", "vision", 2, launch_faults=3, launch_fault_at=95)  # back at 95 + 8
    early = decide([tenant("vision")], [again], now=102, options=OPTIONS)
    assert admitted_ids(early) == []
    waiting = early.waiting["again"]
    assert waiting.code is WaitCode.BACKOFF
    assert "launch failed 3 times in a row (platform fault): backing off until t=103.000" in (
        waiting.reason
    )
    assert admitted_ids(decide([tenant("vision")], [again], now=103, options=OPTIONS)) == ["again"]


def test_the_cap_bounds_the_wait_however_long_the_fault_lasted() -> None:
    stubborn = job("stubborn", "vision", 2, launch_faults=40, launch_fault_at=100)
    assert decide([tenant("vision")], [stubborn], now=159, options=OPTIONS).waiting
    assert admitted_ids(decide([tenant("vision")], [stubborn], now=160, options=OPTIONS)) == [
        "stubborn"
    ]


def test_no_fault_or_no_base_means_no_wait() -> None:
    fresh = job("fresh", "vision", 2, launch_faults=0, launch_fault_at=100)
    assert admitted_ids(decide([tenant("vision")], [fresh], now=100, options=OPTIONS)) == ["fresh"]
    failed = job("failed", "vision", 2, launch_faults=5, launch_fault_at=100)
    assert Options().launch_backoff_until(failed) == -math.inf  # off by default in the core
    assert admitted_ids(decide([tenant("vision")], [failed], now=100)) == ["failed"]


def test_the_later_of_the_eviction_and_launch_back_offs_holds() -> None:
    options = Options(backoff_base_s=10, launch_backoff_base_s=2, launch_backoff_max_s=60)
    both = job(
        "both", "vision", 2, evictions=1, requeued_at=100, launch_faults=1, launch_fault_at=100
    )
    decision = decide([tenant("vision")], [both], now=105, options=options)
    assert decision.waiting["both"].code is WaitCode.BACKOFF
    assert "evicted once" in decision.waiting["both"].reason  # until 110, after the launch's 102


def test_the_incremental_queues_wake_up_when_the_back_off_ends() -> None:
    queues = Queues(Cluster(slots=8, fabric_bps=1e9), [tenant("vision")], OPTIONS)
    queues.submit(job("j", "vision", 2, launch_faults=2, launch_fault_at=100), now=100)
    assert queues.next_wakeup() == 104
    assert queues.decide(103).admissions == []
    assert [a.job_id for a in queues.decide(104).admissions] == ["j"]


@pytest.mark.parametrize(
    "bad",
    [dict(launch_backoff_base_s=-1), dict(launch_backoff_base_s=10, launch_backoff_max_s=5)],
)
def test_options_refuse_a_negative_base_or_a_cap_below_it(bad) -> None:
    with pytest.raises(ValueError):
        Options(**bad)
