"""Adaptive selective sync: the comm hook half (the per-step half is ``strategies.Adaptive``).

Inside each DDP bucket, the gradient slices of *critical* parameters are gathered,
averaged globally through the ``CommEngine`` every step and scattered back; the slices of
non-critical parameters are left as this rank's local gradient (they are averaged as
parameters every H steps after the optimizer step). While ``sync_all`` is set (warm-up)
the whole bucket is averaged, exactly like ``full``.

The critical set changes only at a global sync, from figures all ranks agreed on, so every
rank gathers the same slices and issues the same collectives.

With a wire dtype (``compress``, default bf16) what goes every step is rounded to it with
error feedback (``compress.ErrorFeedback``): half the bytes, and what a rounding left out
goes with the next step's gradient. Every rank receives the same reduced values, so
critical replicas stay identical.
"""

# No `from __future__ import annotations`: DDP checks hook annotations at runtime.

import torch
from torch._C._distributed_c10d import GradBucket  # = dist.GradBucket, typed for mypy

from workers.runtime.compress import ErrorFeedback
from workers.runtime.engine import CommEngine


class SelectiveState:
    """Hook state.

    Hyper-parameters: ``engine``, ``feedback`` (the wire dtype and its residuals). Internal
    state: ``critical`` (ids of critical parameters), ``sync_all``, the per-bucket slice
    cache. Statistics: ``grad_sq``.
    """

    __slots__ = (
        "engine",
        "feedback",
        "world_size",
        "critical",
        "sync_all",
        "grad_sq",
        "_slices",
        "_version",
    )

    def __init__(
        self, *, engine: CommEngine, critical: set[int], feedback: ErrorFeedback | None = None
    ) -> None:
        self.engine = engine
        self.feedback = feedback or ErrorFeedback(None)
        self.world_size = engine.world_size
        self.critical = set(critical)
        self.sync_all = True
        self.grad_sq = 0.0
        self._slices: dict[int, tuple[int, list[tuple[int, int]]]] = {}
        self._version = 0

    def set_critical(self, critical: set[int]) -> None:
        if critical != self.critical:
            self.critical = set(critical)
            self._version += 1
            self.feedback.clear()  # residuals belong to the old gathered layout

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
    state.grad_sq += float(buf.pow(2).sum())
    ranges = [(0, buf.numel())] if state.sync_all else state.slices(bucket)
    whole = len(ranges) == 1 and ranges[0] == (0, buf.numel())
    if whole and not state.feedback.enabled:
        buf.div_(state.world_size)
        return state.engine.submit(buf, flush=bucket.is_last())
    # Gather (a copy), reduce, scatter back. An empty gather still goes to the engine so a
    # last bucket with no critical slice flushes what earlier buckets left pending.
    if whole:
        gathered = buf.div(state.world_size)
    elif ranges:
        gathered = torch.cat([buf[a:b] for a, b in ranges]).div_(state.world_size)
    else:
        gathered = buf.new_empty(0)
    # Keyed by mode and bucket: the gathered layout is fixed for both while the set holds.
    wire = state.feedback.compress((state.sync_all, bucket.index()), gathered)
    fut = state.engine.submit(wire, flush=bucket.is_last())

    def scatter(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        reduced = f.value()
        offset = 0
        for a, b in ranges:
            buf[a:b].copy_(reduced[offset : offset + b - a])  # copy_ casts back to fp32
            offset += b - a
        return buf

    out: torch.futures.Future[torch.Tensor] = fut.then(scatter)
    return out
