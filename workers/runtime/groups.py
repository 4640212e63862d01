"""Process groups for the runtime's own collectives, whatever backend the script chose.

Beside the model's gradients the runtime all-reduces small CPU tensors: the per-step
decision table, link probes, a late-chunk flag. NCCL carries CUDA tensors only, so under a
default group that is NCCL alone the runtime's groups pair it with gloo for CPU tensors
(``cpu:gloo,cuda:nccl``, what torch itself builds when ``init_process_group`` is given no
backend). A collective on the script's own default group (the checkpoint's stop flag) puts
its flag on the current CUDA device instead.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

MIXED = "cpu:gloo,cuda:nccl"


def carries_cpu(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``group`` (default: the default group) can all-reduce CPU tensors."""
    backend = str(dist.get_backend(group))
    return "gloo" in backend or "mpi" in backend


def new_group(ranks: list[int] | None) -> dist.ProcessGroup:
    """A new group over ``ranks`` (all when None) that carries CPU and model tensors alike.

    Collective: every rank of the default group calls it, in the same order.
    """
    backend = None if carries_cpu() else MIXED
    group: dist.ProcessGroup = dist.new_group(ranks=ranks, backend=backend)
    return group


def flag_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where a small flag must live to be all-reduced over ``group``."""
    if carries_cpu(group):
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())
