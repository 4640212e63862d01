"""Per-step communication bookkeeping shared by every strategy's hooks."""

from __future__ import annotations

import threading
import time


def ring_allreduce_wire_bytes(payload_bytes: int, world_size: int) -> int:
    """Return the bytes one rank sends in a ring all-reduce of ``payload_bytes``: 2(n-1)/n * S."""
    if world_size <= 1:
        return 0
    return (2 * (world_size - 1) * payload_bytes) // world_size


class CommStats:
    """What the collectives of the current step cost; ``pop()`` closes the step.

    Collectives complete on gloo's threads (and the throttle's), so updates take a lock.
    ``comm_time_s`` is the union span from the first launch to the last completion in the
    step, not a sum, because DDP buckets overlap each other and the backward pass.
    """

    __slots__ = (
        "_lock",
        "_first_launch",
        "_last_done",
        "_busy_s",
        "_bytes",
        "_payload",
        "_collectives",
        "total_bytes",
        "total_comm_s",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first_launch: float | None = None
        self._last_done: float | None = None
        self._busy_s = 0.0
        self._bytes = 0
        self._payload = 0
        self._collectives = 0
        self.total_bytes = 0
        self.total_comm_s = 0.0

    def launched(self) -> float:
        """Mark a collective's launch; return its start time (``time.perf_counter``)."""
        now = time.perf_counter()
        with self._lock:
            if self._first_launch is None:
                self._first_launch = now
        return now

    def completed(self, started: float, *, payload_bytes: int, wire_bytes: int) -> None:
        """Record a finished collective that began at ``started``."""
        now = time.perf_counter()
        with self._lock:
            self._last_done = now if self._last_done is None else max(self._last_done, now)
            self._busy_s += now - started
            self._bytes += wire_bytes
            self._payload += payload_bytes
            self._collectives += 1

    def last_done(self) -> float | None:
        """Return when the latest collective of this step finished (perf_counter), or None."""
        with self._lock:
            return self._last_done

    def pop(self) -> dict[str, float]:
        """Return this step's figures and start a new step.

        Keys: ``comm_time_s`` (first launch to last completion), ``comm_busy_s`` (sum of
        per-collective durations), ``bytes_sent`` (ring wire bytes this rank sent),
        ``payload_bytes`` (tensor bytes reduced), ``collectives``.
        """
        with self._lock:
            span = 0.0
            if self._first_launch is not None and self._last_done is not None:
                span = max(0.0, self._last_done - self._first_launch)
            out = {
                "comm_time_s": span,
                "comm_busy_s": self._busy_s,
                "bytes_sent": float(self._bytes),
                "payload_bytes": float(self._payload),
                "collectives": float(self._collectives),
            }
            self.total_bytes += self._bytes
            self.total_comm_s += span
            self._first_launch = self._last_done = None
            self._busy_s = 0.0
            self._bytes = self._payload = self._collectives = 0
        return out
