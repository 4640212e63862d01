"""Hooks for ``full``, ``powersgd`` and ``localsgd``: measured, paced, composable.

``full`` hands buckets to the ``CommEngine`` (fusion, chunking, pacing). ``powersgd`` and
``localsgd`` run torch's own hooks unchanged and are *paced after*: the torch hook's Future
goes to the engine, whose thread waits for it, sleeps off the wire bytes and completes our
Future then. No Python ``then()`` callback is put on a gloo Future: gloo's own threads would
run it, and at interpreter exit such a thread can abort the process (see
``CommEngine.pace_after``).
"""

# No `from __future__ import annotations`: DDP checks hook annotations at runtime against
# the real `dist.GradBucket` / `Future[Tensor]` objects, and strings fail that check.

from typing import Any, cast

import torch
from torch._C._distributed_c10d import GradBucket  # = dist.GradBucket, typed for mypy
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as localsgd
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

from workers.runtime.engine import CommEngine
from workers.runtime.stats import ring_allreduce_wire_bytes


def squared_norm(tensor: torch.Tensor) -> float:
    """``||tensor||^2`` in one pass with no temporary (``pow(2).sum()`` allocated a copy of
    the bucket and took ~4x as long on a 480k-element bucket: 182 against 44 us)."""
    return float(torch.linalg.vector_norm(tensor)) ** 2


class EngineHookState:
    """State of the ``full`` hook. Hyper-parameters: ``engine``. Statistics: ``grad_sq``."""

    __slots__ = ("engine", "world_size", "grad_sq")

    def __init__(self, *, engine: CommEngine) -> None:
        self.engine = engine
        self.world_size = engine.world_size
        self.grad_sq = 0.0  # this rank's local squared gradient norm, this step


def engine_allreduce_hook(
    state: EngineHookState, bucket: GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """All-reduce the bucket to its mean through the engine (pre-divide, then SUM).

    Dividing before the reduction is what DDP's built-in reducer does, so with the same
    bucket layout the result equals plain DDP's bit for bit (checked by the tests).
    """
    tensor = bucket.buffer()
    state.grad_sq += squared_norm(tensor)
    tensor.div_(state.world_size)
    return state.engine.submit(tensor, flush=bucket.is_last())


class PacedTorchHookState:
    """Wraps torch's PowerSGD or post-local-SGD state so its traffic is counted and paced."""

    __slots__ = ("engine", "inner", "kind", "world_size", "grad_sq")

    def __init__(
        self,
        *,
        engine: CommEngine,
        inner: "powersgd.PowerSGDState | localsgd.PostLocalSGDState",
    ) -> None:
        self.engine = engine
        self.inner = inner
        self.kind = "powersgd" if isinstance(inner, powersgd.PowerSGDState) else "localsgd"
        self.world_size = engine.world_size
        self.grad_sq = 0.0

    def payload_elements(self, bucket: GradBucket) -> int:
        """Return how many float elements the torch hook will all-reduce for this bucket."""
        if isinstance(self.inner, localsgd.PostLocalSGDState):
            # Before start_localSGD_iter: global all-reduce; after: nothing (local SGD).
            if self.inner.iter < self.inner.start_localSGD_iter:
                return bucket.buffer().numel()
            return 0
        inner = self.inner
        if inner.iter < inner.start_powerSGD_iter:
            return bucket.buffer().numel()
        total = 0
        for grad in bucket.gradients():
            if grad.ndimension() <= 1:
                total += grad.numel()
                continue
            rows, cols = grad.shape[0], grad.numel() // grad.shape[0]
            rank = min(rows, cols, inner.matrix_approximation_rank)
            compress, _, _ = powersgd._should_compress(  # type: ignore[no-untyped-call]
                rows, cols, rank, inner.min_compression_rate
            )
            total += (rows + cols) * rank if compress else grad.numel()
        return total


def paced_torch_hook(
    state: PacedTorchHookState, bucket: GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Run torch's hook as is; complete our Future once the engine has paced its bytes."""
    tensor = bucket.buffer()
    state.grad_sq += squared_norm(tensor)
    payload = state.payload_elements(bucket) * tensor.element_size()
    started = state.engine.stats.launched()
    wire = ring_allreduce_wire_bytes(payload, state.world_size)
    if state.kind == "powersgd":
        # PowerSGD's chain of collectives runs one bucket at a time on the engine's thread
        # (see CommEngine.run_serially); the bucket is read here, on the autograd thread.
        inner_state = state.inner
        assert isinstance(inner_state, powersgd.PowerSGDState)
        view = cast(Any, BucketView(bucket))  # duck-types the GradBucket methods the hook reads
        return state.engine.run_serially(
            lambda: powersgd.powerSGD_hook(inner_state, view),
            started=started,
            payload_bytes=payload,
            wire_bytes=wire,
        )
    assert isinstance(state.inner, localsgd.PostLocalSGDState)
    inner = localsgd.post_localSGD_hook(state.inner, bucket)
    return state.engine.pace_after(inner, started=started, payload_bytes=payload, wire_bytes=wire)


class BucketView:
    """What torch's PowerSGD hook reads of a ``GradBucket``, taken on the autograd thread.

    The hook runs later on the engine's thread; it reads only these four methods.
    """

    __slots__ = ("_buffer", "_index", "_gradients", "_is_last")

    def __init__(self, bucket: GradBucket) -> None:
        self._buffer = bucket.buffer()
        self._index = bucket.index()
        self._gradients = bucket.gradients()
        self._is_last = bucket.is_last()

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return self._index

    def gradients(self) -> list[torch.Tensor]:
        return self._gradients

    def is_last(self) -> bool:
        return self._is_last


def noop_hook(state: object, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """No communication at all (the benchmark's ceiling): return the local gradient."""
    return noop_future(bucket.buffer())


def noop_future(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


__all__ = [
    "BucketView",
    "EngineHookState",
    "PacedTorchHookState",
    "engine_allreduce_hook",
    "noop_future",
    "noop_hook",
    "paced_torch_hook",
]
