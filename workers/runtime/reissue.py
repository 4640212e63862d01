"""Re-issue a slow gradient transfer once, on a spare group: the link ladder's second rung.

``LinkHealth`` turns this on for the engine while a ``link_degraded`` alarm is raised (at a
step boundary, so on every rank at the same step); each transfer keeps the setting it was
submitted with, so one queued across the switch goes out alike on every rank. Each chunk
of a transfer submitted while it is on goes out like this:

1. **first attempt**: a launcher thread all-reduces a scratch copy of the chunk on the
   engine's group; the chunk itself keeps its values for a second attempt;
2. the engine thread waits for it at most ``after_s``;
3. **agreement**: a one-element MAX all-reduce on the spare group, 1 when any rank's first
   attempt had not arrived in time. Gloo cannot cancel a collective in flight, and one rank
   can see the first attempt complete while a peer times out on it; without agreeing, the
   two would then issue different collectives and hang;
4. on 1, every rank all-reduces its untouched chunk on the spare group (its own set of
   connections: another path) and keeps that result. The first attempt still completes
   later on every rank, which keeps the group's collectives matched, and its result is
   dropped.

While on, a chunk costs a scratch copy and a 4-byte collective more, plus at most
``after_s`` of waiting before a retry. Off (a healthy link) none of this runs. Only the
engine may use its group meanwhile, so re-issue is for strategies whose collectives all go
through the engine (``full``, ``adaptive``); torch's own hooks issue theirs directly.

The fault injector's delay on this rank postpones the first attempt's launch until
``ready_at`` (consecutive attempts overlap, like latency on a path, rather than queue up);
a ``blip`` fault spares the retry, so re-issuing gets the chunk through. A persistent fault
delays the retry too: re-issuing does not help and the ladder goes on to escalate.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class _Attempt:
    scratch: torch.Tensor
    ready_at: float  # perf_counter time before which the launch is held (fault delay)
    arrived: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class Reissuer:
    """First attempts on ``group`` (its own thread), agreement and retries on ``spare_group``.

    ``reduce`` runs on the engine's thread; the engine calls ``drain`` before it issues on
    ``group`` itself, so the group's collectives keep one order on every rank.
    """

    def __init__(self, *, group: dist.ProcessGroup, spare_group: dist.ProcessGroup) -> None:
        self.group = group
        self.spare_group = spare_group
        self._queue: queue.SimpleQueue[_Attempt | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._in_flight = 0  # first attempts queued or running
        self._thread: threading.Thread | None = None

    def reduce(
        self, chunk: torch.Tensor, *, after_s: float, first_delay_s: float, retry_delay_s: float
    ) -> float | None:
        """SUM-all-reduce ``chunk`` in place; return when the retry started (None: no retry)."""
        attempt = _Attempt(chunk.clone(), time.perf_counter() + first_delay_s)
        self._launch(attempt)
        arrived = attempt.arrived.wait(after_s)
        if arrived and attempt.error is not None:
            raise attempt.error
        late = torch.tensor([0 if arrived else 1], dtype=torch.int32)
        dist.all_reduce(late, op=dist.ReduceOp.MAX, group=self.spare_group)
        if not int(late.item()):  # arrived everywhere: every rank takes the first attempt
            chunk.copy_(attempt.scratch)
            return None
        if retry_delay_s > 0:
            time.sleep(retry_delay_s)
        retried = time.perf_counter()
        dist.all_reduce(chunk, group=self.spare_group)
        return retried

    def drain(self) -> None:
        """Block until every first attempt has completed (cheap when none is in flight)."""
        with self._idle:
            while self._in_flight:
                self._idle.wait()

    def close(self, timeout: float = 30.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=timeout)

    def _launch(self, attempt: _Attempt) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="synclane-first-attempts", daemon=True
            )
            self._thread.start()
        with self._idle:
            self._in_flight += 1
        self._queue.put(attempt)

    def _run(self) -> None:
        while (attempt := self._queue.get()) is not None:
            wait = attempt.ready_at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                dist.all_reduce(attempt.scratch, group=self.group)
            except Exception as exc:  # raised by reduce() if the engine is still waiting
                attempt.error = exc
            finally:
                attempt.arrived.set()
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()
