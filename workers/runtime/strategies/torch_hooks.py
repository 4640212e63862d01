"""The peers built on torch's own comm hooks, paced by the engine: ``powersgd`` and ``localsgd``."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as localsgd
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.nn.parallel import DistributedDataParallel

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.drift import relative_distance
from workers.runtime.engine import CommEngine
from workers.runtime.hooks.wrappers import PacedTorchHookState, paced_torch_hook
from workers.runtime.stats import ring_allreduce_wire_bytes
from workers.runtime.strategies.base import Strategy, average, flat
from workers.runtime.table import TableRow

# Added to each column's norm when PowerSGD orthogonalises its low-rank factors (torch's
# default is 0). A layer whose gradient is all zero (a branch the loss does not use, a task
# whose loss reached 0: zoo:convnet in bench_sync) otherwise has its factor divided by a zero
# norm: NaN in that layer's gradient, then in its parameters and the loss. 1e-8 is torch's
# own suggestion; against the norms of real gradients it changes nothing measurable.
ORTHOGONALIZATION_EPSILON = 1e-8


class PowerSGD(Strategy):
    """torch's PowerSGD hook (rank ``powersgd_rank``, error feedback, warm start), paced."""

    name = p.SYNC_POWERSGD

    def __init__(self, *, engine: CommEngine, config: RuntimeConfig) -> None:
        super().__init__(engine=engine, config=config)
        inner = powersgd.PowerSGDState(
            process_group=engine.group,
            matrix_approximation_rank=config.powersgd_rank,
            start_powerSGD_iter=max(2, config.warmup_steps),
            orthogonalization_epsilon=ORTHOGONALIZATION_EPSILON,
            random_seed=0,
        )
        self.powersgd = inner
        self.state: PacedTorchHookState = PacedTorchHookState(engine=engine, inner=inner)

    def register(self, ddp: DistributedDataParallel) -> None:
        ddp.register_comm_hook(self.state, paced_torch_hook)

    def state_dict(self) -> dict[str, Any]:
        """The hook's step counter: a resumed run does not repeat the whole warm-up."""
        return {"hook_iter": self.powersgd.iter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on counting from the saved step, with two plain all-reduces first: a new DDP
        rebuilds its buckets after its first step, and the hook's per-bucket error feedback
        and warm-start factors (not saved: per rank, and shaped by those buckets) must be
        made on the rebuilt ones (torch asks ``start_powerSGD_iter`` >= 2 for the same reason)."""
        inner = self.powersgd
        inner.iter = int(state["hook_iter"])
        inner.start_powerSGD_iter = max(inner.start_powerSGD_iter, inner.iter + 2)


class LocalSGD(Strategy):
    """torch's post-local-SGD hook + ``PeriodicModelAverager`` every ``sync_period`` steps.

    After warm-up, gradients stay local (``post_local_gradient_allreduce=False``: a subgroup
    of one rank, which also avoids the implicit per-node subgroup that fails on CPU), and the
    parameters are averaged globally every H steps. The averager's all-reduce is paced after
    it ran, on the main thread, while the engine is idle between steps.
    """

    name = p.SYNC_LOCALSGD

    def __init__(self, *, engine: CommEngine, config: RuntimeConfig) -> None:
        super().__init__(engine=engine, config=config)
        inner = localsgd.PostLocalSGDState(  # type: ignore[no-untyped-call]
            process_group=engine.group,
            subgroup=None,
            start_localSGD_iter=config.warmup_steps,
            post_local_gradient_allreduce=False,
        )
        self.state: PacedTorchHookState = PacedTorchHookState(engine=engine, inner=inner)
        self.averager = PeriodicModelAverager(
            period=config.sync_period,
            warmup_steps=config.warmup_steps,
            process_group=engine.group,
        )
        self.params: list[torch.nn.Parameter] = []  # the model's trainable parameters (register)
        self.synced: list[torch.Tensor] = []  # their values at the last average

    def register(self, ddp: DistributedDataParallel) -> None:
        ddp.register_comm_hook(self.state, paced_torch_hook)
        self.params = [q for q in ddp.module.parameters() if q.requires_grad]
        self.synced = [q.detach().clone() for q in self.params]

    def synced_grad_ids(self) -> set[int] | None:
        # The hook counts a step when its last bucket is reduced: after backward, ``iter``
        # is one past the step whose gradients it just handled.
        inner = self.state.inner
        assert isinstance(inner, localsgd.PostLocalSGDState)
        return None if inner.iter <= inner.start_localSGD_iter else set()

    def local_drift(self) -> float:
        return relative_distance(flat(self.params), flat(self.synced))

    def prepare(self, step: int) -> None:
        """Average the parameters when the averager is due (after every step: a table is
        agreed only every few, ``agrees_at``)."""
        a = self.averager
        due = a.step >= a.warmup_steps and (a.step - a.warmup_steps) % a.period == 0
        if not due:
            a.step += 1
            return
        payload = sum(q.numel() * q.element_size() for q in self.params)
        started = self.engine.stats.launched()
        a.average_parameters(self.params)
        self.engine.pacer.acquire(
            ring_allreduce_wire_bytes(payload, self.world_size), started=started
        )
        self.engine.stats.completed(
            started,
            payload_bytes=payload,
            wire_bytes=ring_allreduce_wire_bytes(payload, self.world_size),
        )
        self.synced = [q.detach().clone() for q in self.params]

    def after_step(
        self, step: int, table: torch.Tensor | None, outgoing: TableRow
    ) -> dict[str, float]:
        return {"sync_period": float(self.averager.period)}

    def synchronize(self) -> None:
        average(self.engine, self.params)

    def state_dict(self) -> dict[str, Any]:
        """The averager's and the hook's step counters: a resumed run does not warm up again."""
        return {"averager_step": self.averager.step, "hook_iter": self.state.inner.iter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.averager.step = int(state["averager_step"])
        self.state.inner.iter = int(state["hook_iter"])
