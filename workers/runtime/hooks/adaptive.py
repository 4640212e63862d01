"""Adaptive selective sync: the comm hook half (the per-step half is ``strategies.Adaptive``).

Inside each DDP bucket, the gradient slices of *critical* parameters are gathered,
averaged globally through the ``CommEngine`` every step and scattered back; the slices of
non-critical parameters are left as this rank's local gradient (they are averaged as
parameters every H steps after the optimizer step). While ``sync_all`` is set (warm-up,
fast-link mode) the whole bucket is averaged, like ``full``; with ``exact`` also set, in
fp32, as ``full`` sends it.

The critical set changes only at a global sync, from figures all ranks agreed on, so every
rank gathers the same slices and issues the same collectives.

With a wire dtype (``compress``, default bf16) what goes is otherwise rounded to it with
error feedback (``compress.ErrorFeedback``): half the bytes, and what a rounding left out
goes with the next step's gradient. Every rank receives the same reduced values, so
critical replicas stay identical. While ``quantize`` is set (``compress=int8``, or ``auto``
where it pays) the critical slices go as blockwise int8 instead (``compress.Int8Feedback``,
a quarter of fp32's bytes), reduced by the engine's ``submit_quantized``; steps that
average everything stay in the wire dtype.

With ``late`` set (``late_critical``) the critical average of a step is applied at the next
step instead, so backward never waits for the link (see ``_late_critical``). With
``overlap`` set (``overlap_critical``, the default) nothing goes here outside ``sync_all``:
the critical parameters are averaged after the optimizer step (``strategies.Adaptive``).
"""

# No `from __future__ import annotations`: DDP checks hook annotations at runtime.

import torch
from torch._C._distributed_c10d import GradBucket  # = dist.GradBucket, typed for mypy

from workers.runtime.compress import ErrorFeedback, Int8Feedback
from workers.runtime.engine import CommEngine
from workers.runtime.hooks.wrappers import squared_norm


class SelectiveState:
    """Hook state.

    Hyper-parameters: ``engine``, ``feedback`` (the wire dtype and its residuals), ``int8``
    (the residuals of critical slices sent in blockwise int8, while ``quantize``). Internal
    state: ``critical`` (ids of critical parameters), ``sync_all``, the per-bucket slice
    cache. Statistics: ``grad_sq``.
    """

    __slots__ = (
        "engine",
        "feedback",
        "int8",
        "world_size",
        "critical",
        "sync_all",
        "grad_sq",
        "late",
        "overlap",
        "exact",
        "quantize",
        "_slices",
        "_version",
        "_late",
    )

    def __init__(
        self, *, engine: CommEngine, critical: set[int], feedback: ErrorFeedback | None = None
    ) -> None:
        self.engine = engine
        self.feedback = feedback or ErrorFeedback(None)
        self.int8 = Int8Feedback()
        self.world_size = engine.world_size
        self.critical = set(critical)
        self.sync_all = True
        self.grad_sq = 0.0
        self.late = False  # critical slices applied one step late (``_late_critical``)
        self.overlap = False  # critical parameters averaged after the step: nothing goes here
        self.exact = False  # while sync_all: send fp32 rather than the wire format
        self.quantize = False  # otherwise: critical slices in blockwise int8
        self._slices: dict[int, tuple[int, list[tuple[int, int]]]] = {}
        self._version = 0
        # Per bucket: the last step's critical ranges and the Future of their average.
        self._late: dict[int, tuple[list[tuple[int, int]], torch.futures.Future[torch.Tensor]]] = {}

    def set_critical(self, critical: set[int]) -> None:
        if critical != self.critical:
            self.critical = set(critical)
            self._version += 1
            self.feedback.clear()  # residuals belong to the old gathered layout
            self.int8.clear()

    def set_quantize(self, quantize: bool) -> None:
        """Switch the critical slices' format (residuals of the other format are dropped)."""
        if quantize != self.quantize:
            self.quantize = quantize
            self.feedback.clear()
            self.int8.clear()

    def drop_late(self) -> None:
        """Forget the averages in flight (sync-everything mode starts: every rank alike)."""
        self._late.clear()

    def slices(self, bucket: GradBucket) -> list[tuple[int, int]]:
        """Return merged [start, end) element ranges of critical parameters in ``bucket``."""
        cached = self._slices.get(bucket.index())
        if cached is not None and cached[0] == self._version:
            return cached[1]
        ranges: list[tuple[int, int]] = []
        offset = 0
        for param in bucket.parameters():
            n = param.numel()
            if id(param) in self.critical:
                if ranges and ranges[-1][1] == offset:
                    ranges[-1] = (ranges[-1][0], offset + n)
                else:
                    ranges.append((offset, offset + n))
            offset += n
        self._slices[bucket.index()] = (self._version, ranges)
        return ranges


def selective_hook(state: SelectiveState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average critical gradient slices globally; keep non-critical slices local."""
    buf = bucket.buffer()
    state.grad_sq += squared_norm(buf)
    if state.overlap and not state.sync_all:
        kept: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        kept.set_result(buf)  # every gradient stays local (the parameters are averaged)
        return kept
    ranges = [(0, buf.numel())] if state.sync_all else state.slices(bucket)
    if state.late and not state.sync_all:
        return _late_critical(state, bucket, buf, ranges)
    whole = len(ranges) == 1 and ranges[0] == (0, buf.numel())
    if (state.sync_all and state.exact) or (whole and not state.feedback.enabled):
        # The whole bucket in place, uncompressed (as full sends it).
        buf.div_(state.world_size)
        return state.engine.submit(buf, flush=bucket.is_last())
    # Gather (a copy), reduce, scatter back. An empty gather still goes to the engine so a
    # last bucket with no critical slice flushes what earlier buckets left pending.
    if whole:
        gathered = buf.div(state.world_size)  # everything, or a bucket of only critical ones
    elif ranges:
        gathered = torch.cat([buf[a:b] for a, b in ranges]).div_(state.world_size)
    else:
        gathered = buf.new_empty(0)
    # Keyed by mode and bucket: the gathered layout is fixed for both while the set holds.
    fut = _reduce((state.sync_all, bucket.index()), state, gathered, flush=bucket.is_last())
    return _scatter_when_done(fut, buf, ranges)


def _reduce(
    key: tuple[bool, int], state: SelectiveState, gathered: torch.Tensor, *, flush: bool
) -> torch.futures.Future[torch.Tensor]:
    """Send gathered slices in their format (error feedback under ``key``); a Future of the
    sum, in any float dtype (the scatter casts it back)."""
    sync_all, _ = key
    if not state.quantize or sync_all or not gathered.numel():
        return state.engine.submit(state.feedback.compress(key, gathered), flush=flush)
    packed = state.int8.compress(key, gathered, rows_multiple=state.world_size)
    numel = gathered.numel()

    def decode(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        return Int8Feedback.decode(f.value(), numel)

    fut: torch.futures.Future[torch.Tensor] = state.engine.submit_quantized(
        packed, key=key, flush=flush
    ).then(decode)
    return fut


def _scatter_when_done(
    fut: torch.futures.Future[torch.Tensor], buf: torch.Tensor, ranges: list[tuple[int, int]]
) -> torch.futures.Future[torch.Tensor]:
    """A Future of ``buf`` with the reduced slices written back into ``ranges``."""

    def scatter(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        reduced = f.value()
        offset = 0
        for a, b in ranges:
            buf[a:b].copy_(reduced[offset : offset + b - a])  # copy_ casts back to fp32
            offset += b - a
        return buf

    out: torch.futures.Future[torch.Tensor] = fut.then(scatter)
    return out


def _late_critical(
    state: SelectiveState, bucket: GradBucket, buf: torch.Tensor, ranges: list[tuple[int, int]]
) -> torch.futures.Future[torch.Tensor]:
    """Send this step's critical slices; give the optimizer the previous step's average.

    The average of step t's critical gradients crosses the link while step t+1 computes, so
    backward does not wait for it; the optimizer applies it at step t+1 (a gradient one step
    stale, the same on every rank, so critical replicas and their optimizer moments stay
    identical). Where no average of the previous step exists (the first selective step, a
    parameter just made critical) the critical slice is zero on every rank this step; a
    parameter just made non-critical gets its last average instead of its local gradient,
    once. Other non-critical slices keep the local gradient, as in the on-time hook.
    """
    index = bucket.index()
    if ranges:
        gathered = torch.cat([buf[a:b] for a, b in ranges]).div_(state.world_size)
    else:
        gathered = buf.new_empty(0)  # still submitted: a last bucket flushes what is pending
    previous = state._late.pop(index, None)
    state._late[index] = (ranges, _reduce((False, index), state, gathered, flush=bucket.is_last()))
    for a, b in ranges:
        buf[a:b].zero_()  # this step's average is in flight
    if previous is None:
        ready: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        ready.set_result(buf)
        return ready
    old_ranges, fut = previous
    return _scatter_when_done(fut, buf, old_ranges)
