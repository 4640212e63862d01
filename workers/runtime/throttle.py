"""Bandwidth throttle: a token bucket that paces this rank's wire bytes.

The rate is the smallest of
  * the job's allocation (bit/s, live from the control plane via ``AllocationClient``),
  * the emulated link (``SYNCLANE_LINK_MBPS``), so benchmarks on loopback have a slow link,
  * times the fault injector's bandwidth factor when a fault is active on this rank.
None of them set means unlimited: ``acquire`` returns at once.

Bytes are counted as a ring all-reduce puts them on the wire, 2(n-1)/n * S per rank
(``stats.ring_allreduce_wire_bytes``), so "100 Mbit/s" means what a NIC would see.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Idle credit (the bucket depth), kept tiny: transfers are paced after they ran, inside their
# own slot, so the link needs no burst to reach its rate, and probes stay honest.
_BURST_S = 0.0005


class TokenBucket:
    """Paces callers to ``rate_fn()`` bytes/s; ``rate_fn`` returning None means unlimited.

    The link is modelled as a serial resource: a transfer of W bytes occupies it for W/rate
    seconds, starting when the previous transfer's slot ended (or now, if the link has been
    idle, with up to ``burst_s`` of idle credit: that is the bucket's depth). ``acquire``
    sleeps until the slot *ends*, so a paced collective completes when a real link of that
    rate would have delivered it, and the achieved long-run rate is the configured one.
    The rate is read at every request, so a new allocation applies to the next transfer.
    """

    def __init__(
        self,
        rate_fn: Callable[[], float | None],
        *,
        burst_s: float = _BURST_S,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._rate_fn = rate_fn
        self._burst_s = burst_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._free_at = clock()
        self.waited_s = 0.0  # total time spent pacing, for statistics
        self.granted_bytes = 0

    def rate(self) -> float | None:
        """Return the current rate in bytes/s (None: unlimited)."""
        return self._rate_fn()

    def busy_for(self) -> float:
        """Return the seconds until the link's last granted slot ends (0: idle now)."""
        with self._lock:
            return max(0.0, self._free_at - self._clock())

    def acquire(self, nbytes: int, *, started: float | None = None) -> float:
        """Block until ``nbytes`` would have crossed the link; return the seconds waited.

        ``started`` (a ``clock()`` time) is for callers that pace *after* a transfer that
        already ran (torch's PowerSGD/averager collectives): the slot begins no later than it.
        """
        with self._lock:
            rate = self._rate_fn()
            now = self._clock()
            self.granted_bytes += nbytes
            if rate is None or nbytes <= 0:
                self._free_at = now
                return 0.0
            begin = now if started is None else min(now, started)
            slot_start = max(self._free_at, begin - self._burst_s)
            self._free_at = slot_start + nbytes / rate
            wait = max(0.0, self._free_at - now)
            self.waited_s += wait
        if wait > 0:
            self._sleep(wait)
        return wait


def link_rate_fn(
    *,
    link_mbps: float | None,
    allocation_bps: Callable[[], int | None],
    fault_factor: Callable[[], float],
) -> Callable[[], float | None]:
    """Return a function giving the throttle's current rate in bytes/s (None: unlimited)."""
    link_bytes = None if link_mbps is None else link_mbps * 1e6 / 8

    def rate() -> float | None:
        alloc = allocation_bps()
        candidates = [
            r for r in (link_bytes, None if alloc is None else alloc / 8) if r is not None
        ]
        if not candidates:
            return None
        return min(candidates) * fault_factor()

    return rate
