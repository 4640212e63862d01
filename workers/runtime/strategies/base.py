"""What every sync strategy shares: the ``Strategy`` base, the agreed table's columns,
``full`` and ``none`` (the engine's own hooks), and in-place parameter averaging.

Each strategy registers one DDP comm hook and may act after each optimizer step with the
per-step table every rank agreed on (``Session._agree``): one row per rank, columns
``COLUMNS``, of the step before (it travels while a step computes). Decisions taken from
that table are identical on every rank, which is what keeps the ranks' collectives matched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch.nn.parallel import DistributedDataParallel

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.engine import CommEngine
from workers.runtime.hooks.wrappers import EngineHookState, engine_allreduce_hook, noop_hook
from workers.runtime.table import TableRow

# Columns of the agreed per-step table.
COLUMNS = ("drift", "grad_norm", "sync_delay_s", "loss", "step_time_s", "rate_Bps")
COL = {name: i for i, name in enumerate(COLUMNS)}

# How often a strategy that decides nothing from the agreed table (``full``, the torch
# hooks', ``adaptive`` while it averages everything) agrees one: after the first step that
# ends ``table_interval_s`` (SYNCLANE_TABLE_INTERVAL_S, 20 ms) of agreed step time after
# the last table, at most MAX_TABLE_PERIOD steps apart, and after every step while the link
# alarm is raised (the link monitor then follows the link step by step). The table feeds
# the link monitor and the reported figures, and each is a meeting of the ranks: about 1 ms
# and 0.6 ms of CPU a rank on the 2-core benchmark machine (bench_meeting). With a table
# after every step (the rule before) wrap(full) took 1.11-1.45x plain DDP's step with no
# link limit, 1.05-1.15x with this cadence (bench_wrap at 59f2955, 1 MB buckets then;
# docs/benchmarks.md). Steps of 20 ms or more agree after each.
MAX_TABLE_PERIOD = 8


def table_period(step_time_s: float, interval_s: float, *, alarmed: bool) -> int:
    """Steps until the next agreed table: enough of the last table's agreed step time to
    make ``interval_s`` (at most ``MAX_TABLE_PERIOD``); 1 while the link alarm is raised,
    with no step time known yet, or with no interval."""
    if alarmed or step_time_s <= 0 or interval_s <= 0:
        return 1
    return max(1, min(MAX_TABLE_PERIOD, math.ceil(interval_s / step_time_s)))


class GradSquares(Protocol):
    """A hook state that sums this rank's squared gradient norm over a step."""

    grad_sq: float


class Strategy:
    """Base: register a hook; optionally act after each optimizer step.

    ``state`` is the registered hook's state (None: a hook that measures nothing); the
    base reads and resets its gradient statistics, so subclasses only create it.
    """

    name = "base"

    def __init__(self, *, engine: CommEngine, config: RuntimeConfig) -> None:
        self.engine = engine
        self.config = config
        self.world_size = engine.world_size
        self.state: GradSquares | None = None
        # The agreed table's cadence (``agrees_at``), set by the session at each table.
        self.table_period = 1  # steps from one table to the next (``table_period``)
        self.last_table = 0  # the step of the last agreed table

    def register(self, ddp: DistributedDataParallel) -> None:
        raise NotImplementedError

    def pop_grad_sq(self) -> float:
        """Return this rank's local squared gradient norm of the step and reset it (0: none)."""
        if self.state is None:
            return 0.0
        value, self.state.grad_sq = self.state.grad_sq, 0.0
        return value

    def synced_grad_ids(self) -> set[int] | None:
        """ids of parameters whose gradients are averaged across ranks at this step (None: all).

        ``SyncSession.clip_grad_norm_`` averages the rest's share of the norm across ranks.
        """
        return None

    def prepare(self, step: int) -> None:
        """Called after optimizer step ``step``, before the per-step figures are taken."""

    def agrees_at(self, step: int) -> bool:
        """Whether the ranks agree a table after optimizer step ``step``: here
        ``table_period`` steps after the last one (see ``MAX_TABLE_PERIOD``).

        A strategy that decides less often may skip steps; then the next agreed table covers
        every step since the last one, and ``after_step`` is called at agreeing steps only.
        Agreed state only: every rank must agree at the same steps.
        """
        return step - self.last_table >= self.table_period

    def local_drift(self) -> float:
        """Return this rank's drift from the last globally synced weights (0: always synced)."""
        return 0.0

    def after_step(
        self, step: int, table: torch.Tensor | None, outgoing: TableRow
    ) -> dict[str, float]:
        """Act after optimizer step ``step`` on the agreed table of the step before (None
        at the first step: no table has been agreed yet); return figures to report.

        ``outgoing`` is this step's row of the next table: a collective started here may
        carry it (``TableRow.ride``), sparing the ranks a meeting; else the session sends
        it alone. Whether it rides must be agreed."""
        return {}

    def synchronize(self) -> None:
        """Make all replicas identical now (average parameters); no-op when always in sync."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps so a resumed run goes on where it stopped ({}: nothing).

        Plain numbers and names only: the same on every rank, since decisions are agreed.
        """
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s output (after ``register``; the caller re-syncs after)."""


class Full(Strategy):
    """Plain data parallel: every gradient averaged every step, through the engine.

    Equal to torch's DDP bit for bit at any world size: the hook pre-divides as DDP's reducer
    does, and the engine sends each bucket whole (``whole_buckets``), as the reducer does. Gloo's
    sum order over three or more ranks depends on an element's position in the tensor, so
    fusing or splitting buckets would change the last bits (seen: ~1e-7 at 4 ranks). Only a
    degraded link, whose health check shrinks the chunks, splits buckets.
    """

    name = p.SYNC_FULL

    def __init__(self, *, engine: CommEngine, config: RuntimeConfig) -> None:
        super().__init__(engine=engine, config=config)
        self.state: EngineHookState = EngineHookState(engine=engine)
        engine.whole_buckets = True

    def register(self, ddp: DistributedDataParallel) -> None:
        ddp.register_comm_hook(self.state, engine_allreduce_hook)


class NoComm(Strategy):
    """Benchmark ceiling only: no gradient communication at all (replicas diverge)."""

    name = p.SYNC_NONE

    def register(self, ddp: DistributedDataParallel) -> None:
        ddp.register_comm_hook(None, noop_hook)

    def synced_grad_ids(self) -> set[int] | None:
        return set()


def flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One detached 1-D tensor holding ``tensors`` end to end (empty for none)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors]) if tensors else torch.zeros(0)


def average(engine: CommEngine, tensors: Sequence[torch.Tensor]) -> None:
    """Average ``tensors`` across ranks in place with one paced all-reduce."""
    if not tensors:
        return
    flattened = flat(tensors).div_(engine.world_size)
    engine.allreduce(flattened)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(flattened[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
