"""The ``full`` strategy's hook: a measured all-reduce, numerically the same as plain DDP."""

# No `from __future__ import annotations` here: DDP checks hook annotations at runtime
# against the real `dist.GradBucket` / `Future[Tensor]` objects, and strings fail that check.

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket  # = dist.GradBucket; typed for mypy

from workers.runtime.stats import CommStats, ring_allreduce_wire_bytes


class AllReduceState:
    """Hook state. Hyper-parameters: ``process_group``. Statistics: ``stats``."""

    __slots__ = ("process_group", "world_size", "stats")

    def __init__(self, *, process_group: "dist.ProcessGroup | None", stats: CommStats) -> None:
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.stats = stats


def allreduce_hook(state: AllReduceState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce the bucket to its mean, recording time and wire bytes.

    Divide first, then SUM: gloo has no AVG op, and dividing before the reduction is what
    DDP's built-in reducer does, so losses match plain DDP bit for bit.
    """
    tensor = bucket.buffer()
    tensor.div_(state.world_size)
    payload = tensor.numel() * tensor.element_size()
    started = state.stats.launched()
    fut = dist.all_reduce(tensor, group=state.process_group, async_op=True).get_future()

    def finish(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        state.stats.completed(
            started,
            payload_bytes=payload,
            wire_bytes=ring_allreduce_wire_bytes(payload, state.world_size),
        )
        return f.value()[0]

    out: torch.futures.Future[torch.Tensor] = fut.then(finish)
    return out
