"""TokenBucket and the rate it enforces, on a simulated clock (no sleeping)."""

from __future__ import annotations

import pytest

from workers.runtime.throttle import TokenBucket, link_rate_fn


class SimClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def bucket(rate: list[float | None], clock: SimClock) -> TokenBucket:
    return TokenBucket(lambda: rate[0], clock=clock, sleep=clock.sleep)


def test_back_to_back_transfers_take_bytes_over_rate() -> None:
    clock, rate = SimClock(), [10_000.0]
    tb = bucket(rate, clock)
    for _ in range(10):
        tb.acquire(1_000)
    assert clock.now == pytest.approx(1.0, abs=0.001)


def test_time_spent_in_the_transfer_itself_counts_toward_its_slot() -> None:
    clock, rate = SimClock(), [10_000.0]
    tb = bucket(rate, clock)
    started = clock()
    clock.now += 0.03  # the real collective took 30 ms of a 100 ms slot
    waited = tb.acquire(1_000, started=started)
    assert waited == pytest.approx(0.07, abs=0.001)


def test_a_new_rate_applies_to_the_next_transfer() -> None:
    clock, rate = SimClock(), [10_000.0]
    tb = bucket(rate, clock)
    tb.acquire(1_000)
    rate[0] = 1_000.0
    assert tb.acquire(1_000) == pytest.approx(1.0, abs=0.001)


def test_unlimited_never_waits_and_still_counts_bytes() -> None:
    clock, rate = SimClock(), [None]
    tb = bucket(rate, clock)
    assert tb.acquire(10**9) == 0.0
    assert tb.granted_bytes == 10**9 and clock.now == 0.0


def test_an_idle_link_gives_no_more_than_a_tiny_credit() -> None:
    clock, rate = SimClock(), [10_000.0]
    tb = bucket(rate, clock)
    clock.now = 100.0  # long idle
    assert tb.acquire(1_000) >= 0.099


def test_the_rate_is_the_smaller_of_link_and_allocation_times_the_fault_factor() -> None:
    alloc: list[int | None] = [None]
    factor = [1.0]
    rate = link_rate_fn(
        link_mbps=100.0, allocation_bps=lambda: alloc[0], fault_factor=lambda: factor[0]
    )
    assert rate() == 12_500_000
    alloc[0] = 40_000_000
    assert rate() == 5_000_000
    factor[0] = 0.1
    assert rate() == pytest.approx(500_000)


def test_no_link_and_no_allocation_means_unlimited() -> None:
    rate = link_rate_fn(link_mbps=None, allocation_bps=lambda: None, fault_factor=lambda: 1.0)
    assert rate() is None
