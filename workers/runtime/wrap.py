"""``wrap()``: the one call a training script makes to get Synclane's synchronisation.

    model = wrap(model, optimizer=optimizer)        # strategy from SYNCLANE_SYNC, default full
    loss = model(x, y); loss.backward(); optimizer.step()
    figures = model.session.pop_step_stats()        # comm time, bytes sent, drift, ...

The user's model code is unchanged: the result is a ``DistributedDataParallel`` subclass
with a communication hook registered, plus a ``session``. Passing the optimizer lets the
session act after each ``optimizer.step()`` (periodic averaging, drift and link checks)
through a step post-hook, so the training loop needs no extra calls. Without it, call
``model.session.after_optimizer_step()`` yourself after each step.

After each optimizer step every rank contributes one row of figures to a small all-reduce
(the *agreed table*: drift, gradient norm, sync delay, loss, step time, link rate), so all
ranks take the same decisions about averaging, chunk size, alarms and escalation.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.engine import BACKGROUND_CHUNK_BYTES, CommEngine
from workers.runtime.faults import FaultSpec
from workers.runtime.health import LinkFailure, LinkHealth
from workers.runtime.probes import LinkSample, probe_links, report_links
from workers.runtime.reporter import AllocationClient, Reporter
from workers.runtime.stats import CommStats, ring_allreduce_wire_bytes
from workers.runtime.strategies import COL, COLUMNS, Strategy, bucket_cap_mb, build
from workers.runtime.throttle import TokenBucket, link_rate_fn

__all__ = ["LinkFailure", "SyncSession", "SynclaneDDP", "wrap"]


class SyncSession:
    """Everything ``wrap`` set up for one model: engine, strategy, monitors, statistics."""

    def __init__(
        self,
        *,
        config: RuntimeConfig,
        group: dist.ProcessGroup,
        table_group: dist.ProcessGroup,
        reporter: Reporter | None,
        allocation: AllocationClient | None,
        background_group: dist.ProcessGroup | None = None,
        spare_group: dist.ProcessGroup | None = None,
    ) -> None:
        self.config = config
        self.reporter = reporter
        self.allocation = allocation
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size(group)
        self.table_group = table_group
        self.step = 0  # optimizer steps completed (the global step after set_step)
        self.stats = CommStats()
        self.fault = FaultSpec.parse(config.fault) if config.fault else None
        self.pacer = TokenBucket(
            link_rate_fn(
                link_mbps=config.link_mbps,
                allocation_bps=allocation.current_bps if allocation is not None else lambda: None,
                fault_factor=self._fault_factor,
            )
        )
        self.engine = CommEngine(
            group=group,
            pacer=self.pacer,
            stats=self.stats,
            rank=self.rank,
            chunk_bytes=config.chunk_kb * 1024,
            fault=self.fault,
            step_fn=lambda: self.step + 1,  # collectives during step s+1's backward
            spare_group=spare_group,
        )
        # The background lane (adaptive's periodic averages): own group, thread and stats,
        # same link; it yields to the step's gradients.
        self.background_stats = CommStats()
        self.background: CommEngine | None = None
        if background_group is not None:
            self.background = CommEngine(
                group=background_group,
                pacer=self.pacer,
                stats=self.background_stats,
                rank=self.rank,
                chunk_bytes=BACKGROUND_CHUNK_BYTES,
                fault=self.fault,
                step_fn=lambda: self.step + 1,
                yield_to=self.engine.wait_until_idle,
            )
        self.health = LinkHealth(
            engine=self.engine,
            threshold_s=config.jitter_threshold_s,
            reporter=reporter,
            reissue_after_s=config.reissue_wait_s,
        )
        self.strategy: Strategy
        self.figures: dict[str, float] = {}
        self.links: list[LinkSample] = []  # the latest probe matrix (pairs i < j)
        self._loss: torch.Tensor | None = None
        self._last_step_end = time.perf_counter()
        self._closed = False

    @property
    def name(self) -> str:
        return self.config.sync

    def set_step(self, step: int) -> None:
        """Tell the session the global step (e.g. after resuming from a checkpoint)."""
        self.step = step

    def note_loss(self, loss: torch.Tensor | float) -> None:
        """Record this step's loss (done automatically when forward returns a scalar)."""
        self._loss = loss if isinstance(loss, torch.Tensor) else torch.tensor(float(loss))

    def allocation_bps(self) -> int | None:
        """Return the job's current allocation in bit/s (None: unlimited or unknown)."""
        return None if self.allocation is None else self.allocation.current_bps()

    def after_optimizer_step(self) -> None:
        """Close a step: agree on figures, let the strategy act, check link health.

        Raises ``LinkFailure`` (on every rank at the same step) when the link stayed degraded.
        """
        self.step += 1
        started = time.perf_counter()
        step_time = started - self._last_step_end
        self.strategy.prepare(self.step)
        link = self.engine.pop_link_stats()
        last_done = self.stats.last_done()
        bucket_exposed = (
            max(0.0, last_done - link["last_submit"]) if last_done and link["last_submit"] else 0.0
        )
        row = [0.0] * len(COLUMNS)
        row[COL["drift"]] = self.strategy.local_drift()
        row[COL["grad_norm"]] = math.sqrt(self.strategy.pop_grad_sq())
        row[COL["sync_delay_s"]] = link["sync_delay_s"]
        row[COL["loss"]] = float(self._loss.detach()) if self._loss is not None else math.nan
        row[COL["step_time_s"]] = step_time
        row[COL["rate_Bps"]] = self.pacer.rate() or 0.0
        table = self._agree(row)
        figures = self.strategy.after_step(self.step, table)
        try:
            self.health.update(
                step=self.step,
                sync_delays=table[:, COL["sync_delay_s"]].tolist(),
                reissued=int(link["reissued"]),
            )
            if self.config.probe_every and self.step % self.config.probe_every == 0:
                self._probe()
        finally:
            rate = self.pacer.rate()
            figures.update(
                exposed_comm_s=bucket_exposed + time.perf_counter() - started,
                sync_delay_s=self.health.sync_delay_s,
                jitter_s=self.health.jitter_s,
                chunk_bytes=float(self.engine.chunk_bytes),
                reissued=link["reissued"],
                link_rate_bps=rate * 8 if rate is not None else 0.0,
            )
            self.figures = figures
            self._loss = None
            self._last_step_end = time.perf_counter()

    def pop_step_stats(self) -> dict[str, float]:
        """Return this step's figures and reset the counters.

        Keys: ``comm_time_s``, ``comm_busy_s``, ``bytes_sent`` (ring wire bytes this rank
        sent), ``payload_bytes``, ``collectives``, ``busbw_bps`` (wire bits per second of
        busy comm time), and the strategy's and link monitor's figures (``exposed_comm_s``,
        ``sync_delay_s``, ``jitter_s``, ``chunk_bytes``, ``reissued``, ``link_rate_bps``;
        adaptive adds ``drift``, ``sync_period``, ``grad_norm_var``, ``loss_descent_rate``,
        ``critical_fraction``, ``sync_enhanced``).
        """
        out = self.stats.pop()
        # Background bytes count (they crossed the link); their time is off the step's path.
        background = self.background_stats.pop()
        for key in ("bytes_sent", "payload_bytes", "collectives"):
            out[key] += background[key]
        busy = out["comm_busy_s"]
        out["busbw_bps"] = out["bytes_sent"] * 8 / busy if busy > 0 else 0.0
        out.update(self.figures)
        return out

    def synchronize(self) -> None:
        """Make every replica identical now (e.g. before a final evaluation or export)."""
        self.strategy.synchronize()

    def close(self) -> None:
        """Stop the engine thread and the allocation client. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.background is not None:
            self.background.close()
        self.engine.close()
        if self.allocation is not None:
            self.allocation.close()

    def _probe(self) -> None:
        """Measure the rank-pair link matrix and report it (``link`` messages)."""
        self.links = probe_links(
            group=self.table_group,
            pacer=self.pacer,
            rank=self.rank,
            world_size=self.world_size,
            step=self.step,
            fault=self.fault,
            slow_s=self.config.jitter_threshold_s,
        )
        if self.reporter is not None:
            report_links(
                self.reporter,
                self.links,
                step=self.step,
                threshold_s=self.config.jitter_threshold_s,
            )

    def _fault_factor(self) -> float:
        f = self.fault
        if f is not None and f.active(self.rank, self.step + 1):
            return f.bandwidth_factor
        return 1.0

    def _agree(self, row: list[float]) -> torch.Tensor:
        """All-reduce a (world x columns) table in which each rank filled its own row."""
        table = torch.zeros(self.world_size, len(row), dtype=torch.float64)
        table[self.rank] = torch.tensor(row, dtype=torch.float64)
        if self.config.sync != p.SYNC_NONE:
            # On its own group from this thread, not through the engine: the engine may still
            # be carrying an overlapped average, and 100 bytes need no pacing (but are counted).
            payload = table.numel() * table.element_size()
            started = self.stats.launched()
            dist.all_reduce(table, group=self.table_group)
            self.stats.completed(
                started,
                payload_bytes=payload,
                wire_bytes=ring_allreduce_wire_bytes(payload, self.world_size),
            )
        return table


class SynclaneDDP(DistributedDataParallel):
    """A ``DistributedDataParallel`` that carries its ``SyncSession``."""

    session: SyncSession


def wrap(
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    config: RuntimeConfig | None = None,
    process_group: dist.ProcessGroup | None = None,
    reporter: Reporter | None = None,
    allocation: AllocationClient | None = None,
) -> SynclaneDDP:
    """Wrap ``model`` for data-parallel training with the configured sync strategy.

    ``config`` None reads ``RuntimeConfig.from_env()``; ``reporter``/``allocation`` None
    build them from the config (no-ops without a control plane). Requires an initialised
    default process group (``torchrun`` + ``dist.init_process_group``); collective call, run
    it on every rank. Returns the wrapped model; ``model.session`` holds the bookkeeping.
    """
    cfg = config or RuntimeConfig.from_env()
    if not dist.is_initialized():
        raise RuntimeError("wrap() needs torch.distributed initialised (run under torchrun)")
    ranks = dist.get_process_group_ranks(process_group) if process_group is not None else None
    # The engine's own group: its thread's collectives never interleave with the main
    # thread's (STACK-NOTES 3). new_group is collective; every rank calls wrap().
    group = dist.new_group(ranks=ranks)
    table_group = dist.new_group(ranks=ranks)
    background_group = dist.new_group(ranks=ranks) if cfg.sync == p.SYNC_ADAPTIVE else None
    # Re-issue of late chunks needs a spare group, and an engine that is the only user of its
    # group: full and adaptive (torch's PowerSGD/local SGD hooks issue on it themselves).
    reissue = cfg.sync in (p.SYNC_FULL, p.SYNC_ADAPTIVE) and cfg.reissue_wait_s is not None
    spare_group = dist.new_group(ranks=ranks) if reissue else None
    if reporter is None:
        reporter = Reporter.from_env(cfg)
    if allocation is None:
        allocation = AllocationClient.from_env(cfg).start()
    ddp_kwargs: dict[str, Any] = {
        "process_group": process_group,
        "bucket_cap_mb": bucket_cap_mb(cfg),
    }
    ddp = SynclaneDDP(model, **ddp_kwargs)
    session = SyncSession(
        config=cfg,
        group=group,
        table_group=table_group,
        reporter=reporter,
        allocation=allocation,
        background_group=background_group,
        spare_group=spare_group,
    )
    session.strategy = build(
        engine=session.engine,
        background=session.background,
        config=cfg,
        reporter=reporter,
        optimizer=optimizer,
    )
    session.strategy.register(ddp)
    ddp.session = session
    ddp.register_forward_hook(_capture_loss(session))
    if optimizer is not None:
        optimizer.register_step_post_hook(lambda *_: session.after_optimizer_step())
    return ddp


def _capture_loss(session: SyncSession) -> Any:
    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor) and output.numel() == 1:
            session._loss = output.detach()

    return hook
