"""``wrap()``: the one call a training script makes to get Synclane's synchronisation.

    model = wrap(model, optimizer=optimizer)        # strategy from SYNCLANE_SYNC, default full
    loss = model(x).loss; loss.backward(); optimizer.step()
    stats = model.session.pop_step_stats()          # comm time, bytes sent, ...

The user's model code is unchanged: the result is a ``DistributedDataParallel`` (subclass)
with a communication hook registered, plus a ``session`` holding the bookkeeping. Passing the
optimizer lets strategies act after each ``optimizer.step()`` (periodic averaging, drift
checks) through a step post-hook, so the training loop needs no extra calls.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.hooks.allreduce import AllReduceState, allreduce_hook
from workers.runtime.stats import CommStats


class SyncSession:
    """Everything ``wrap`` set up for one model: config, statistics, step counter."""

    def __init__(self, *, config: RuntimeConfig, process_group: dist.ProcessGroup | None) -> None:
        self.config = config
        self.process_group = process_group
        self.stats = CommStats()
        self.step = 0  # optimizer steps completed since wrap (or since set_step)

    @property
    def strategy(self) -> str:
        return self.config.sync

    def set_step(self, step: int) -> None:
        """Tell the session the global step (e.g. after resuming from a checkpoint)."""
        self.step = step

    def after_optimizer_step(self) -> None:
        """Called after each ``optimizer.step()`` (by the post-hook when wrap got the optimizer)."""
        self.step += 1

    def pop_step_stats(self) -> dict[str, float]:
        """Return this step's communication figures and reset them (see ``CommStats.pop``)."""
        return self.stats.pop()

    def close(self) -> None:
        """Stop background helpers. Safe to call twice."""


class SynclaneDDP(DistributedDataParallel):
    """A ``DistributedDataParallel`` that carries its ``SyncSession``."""

    session: SyncSession


def wrap(
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    config: RuntimeConfig | None = None,
    process_group: dist.ProcessGroup | None = None,
) -> SynclaneDDP:
    """Wrap ``model`` for data-parallel training with the configured sync strategy.

    ``config`` None reads ``RuntimeConfig.from_env()``. Requires an initialised default
    process group (``torchrun`` + ``dist.init_process_group``). Returns the wrapped model.
    """
    cfg = config or RuntimeConfig.from_env()
    if not dist.is_initialized():
        raise RuntimeError("wrap() needs torch.distributed initialised (run under torchrun)")
    if cfg.sync != p.SYNC_FULL:
        raise NotImplementedError(f"sync strategy {cfg.sync!r} is not available yet")
    ddp_kwargs: dict[str, Any] = {
        "process_group": process_group,
        "bucket_cap_mb": cfg.bucket_cap_mb,
    }
    ddp = SynclaneDDP(model, **ddp_kwargs)
    session = SyncSession(config=cfg, process_group=process_group)
    ddp.register_comm_hook(
        AllReduceState(process_group=process_group, stats=session.stats), allreduce_hook
    )
    ddp.session = session
    if optimizer is not None:
        optimizer.register_step_post_hook(lambda *_: session.after_optimizer_step())
    return ddp
