"""``wrap()``: the one call a training script makes to get Synclane's synchronisation.

    model = wrap(model, optimizer=optimizer)        # strategy from SYNCLANE_SYNC, default full
    loss = model(x, y); loss.backward(); optimizer.step()
    figures = model.session.pop_step_stats()        # comm time, bytes sent, drift, ...

The user's model code is unchanged: the result is a ``DistributedDataParallel`` subclass
with a communication hook registered, plus a ``session``. Passing the optimizer lets the
session act after each ``optimizer.step()`` (periodic averaging, drift and link checks)
through a step post-hook, so the training loop needs no extra calls. Without it, call
``model.session.after_optimizer_step()`` yourself after each step.

After an optimizer step every rank contributes one row of figures to a small all-reduce
(the *agreed table*: drift, gradient norm, sync delay, loss, step time, link rate), so all
ranks take the same decisions about averaging, chunk size, alarms and escalation. The
all-reduce travels while the next step computes: the decisions at the end of step t are
taken on the table before, the same on every rank, and no rank waits for the others
between steps. Each table is a meeting of the ranks, so it is not agreed after every step
(``Strategy.agrees_at``): adaptive during selective sync agrees with each critical
average, every second step; the other strategies (and adaptive while it averages
everything) once per 20 ms of agreed step time, after every step while the link alarm is
raised (``strategies.base.table_period``). A row covers the steps since the last table
(their mean loss and step time, the worst sync delay), and decisions are taken at
agreeing steps on the previous agreeing step's table. Link probes run at their own steps.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import statistics
import time
import warnings
import weakref
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.engine import BACKGROUND_CHUNK_BYTES, CommEngine
from workers.runtime.faults import FaultSpec
from workers.runtime.groups import new_group
from workers.runtime.health import LinkFailure, LinkHealth
from workers.runtime.probes import LinkSample, probe_links, report_links
from workers.runtime.reporter import AllocationClient, Reporter
from workers.runtime.stats import CommStats
from workers.runtime.strategies import (
    COL,
    COLUMNS,
    Strategy,
    broadcasts_buffers,
    bucket_cap_mb,
    build,
    table_period,
)
from workers.runtime.table import TableRow
from workers.runtime.throttle import TokenBucket, link_rate_fn

__all__ = ["LinkFailure", "SyncSession", "SynclaneDDP", "wrap"]

# How long the exit handler lets gloo's threads finish their Python callbacks (_close_at_exit).
EXIT_GRACE_S = 0.25


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
        # The end of the last step: a step's time runs from there to the end of its optimizer
        # step. The first one's clock starts at its forward (``start_clock``): what runs
        # between wrap() and training (loading a checkpoint, starting data loaders) is no
        # step's time, and the first step's time is all the timing decisions after it have.
        self._last_step_end = time.perf_counter()
        # The figures of the steps since the last agreed table (see after_optimizer_step).
        self._compute_s = 0.0
        self._steps = 0
        self._losses: list[float] = []
        # The last agreed table on its way (alone on the table group, or riding a collective).
        self._agreeing: TableRow | None = None
        self._reissued = 0  # chunks re-issued in the step of the table on its way
        self._closed = False
        self.groups: list[dist.ProcessGroup] = []  # the process groups wrap() made for it

    @property
    def name(self) -> str:
        return self.config.sync

    def set_step(self, step: int) -> None:
        """Tell the session the global step (e.g. after resuming from a checkpoint)."""
        self.step = step

    def start_clock(self) -> None:
        """Start the first step's clock now (wrap() calls it at the first forward)."""
        self._last_step_end = time.perf_counter()

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
        self._compute_s += started - self._last_step_end
        self._steps += 1
        if self._loss is not None:
            self._losses.append(float(self._loss.detach()))
            self._loss = None
        self.strategy.prepare(self.step)
        if not self.strategy.agrees_at(self.step):
            # Nothing is agreed or decided after this step: its figures go into the next
            # agreed table (the strategy's figures stay the last ones).
            self._probe_if_due()
            self.figures = {**self.figures, "exposed_comm_s": time.perf_counter() - started}
            self._last_step_end = time.perf_counter()
            return
        link = self.engine.pop_link_stats()
        last_done = self.stats.last_done()
        bucket_exposed = (
            max(0.0, last_done - link["last_submit"]) if last_done and link["last_submit"] else 0.0
        )
        # The row covers the steps since the last agreed table: their mean compute time (the
        # session's own work left out), gradient norm and loss, the worst sync delay.
        row = [0.0] * len(COLUMNS)
        row[COL["drift"]] = self.strategy.local_drift()
        row[COL["grad_norm"]] = math.sqrt(self.strategy.pop_grad_sq() / self._steps)
        row[COL["sync_delay_s"]] = link["sync_delay_s"]
        row[COL["loss"]] = statistics.fmean(self._losses) if self._losses else math.nan
        row[COL["step_time_s"]] = self._compute_s / self._steps
        row[COL["rate_Bps"]] = self.pacer.rate() or 0.0
        self._compute_s, self._steps, self._losses = 0.0, 0, []
        outgoing = TableRow(row, rank=self.rank, world_size=self.world_size, step=self.step)
        table, measured = self._agree(outgoing)  # the last agreed step's (see _agree)
        # Chunks re-issued in the steps the table is of (the same count on every rank).
        reissued, self._reissued = self._reissued, int(link["reissued"])
        figures = self.strategy.after_step(self.step, table, outgoing)
        if self.config.sync != p.SYNC_NONE:
            outgoing.send_alone(self.table_group, self.stats)  # unless it rides (after_step)
            self._agreeing = outgoing
        try:
            if table is not None:
                self.health.update(
                    step=measured,  # alarms name the step that was measured
                    sync_delays=table[:, COL["sync_delay_s"]].tolist(),
                    reissued=reissued,
                )
            self._set_table_cadence(table)
            self._probe_if_due()
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
            self._last_step_end = time.perf_counter()

    def pop_step_stats(self) -> dict[str, float]:
        """Return this step's figures and reset the counters.

        Keys: ``protocol.COMM_FIGURES`` (``bytes_sent`` counts the ring wire bytes this rank
        sent, ``busbw_bps`` the wire bits per second of busy comm time), the link monitor's
        ``protocol.LINK_FIGURES`` and the strategy's (adaptive: ``protocol.STRATEGY_FIGURES``).
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
        """Make every replica identical now (e.g. before a final evaluation or export).

        ``adaptive`` and ``localsgd`` keep some parameters local between averages, so the
        ranks' replicas differ then; ``full`` and ``powersgd`` are always in sync (no-op).
        Collective: call it on every rank.
        """
        self.strategy.synchronize()

    def clip_grad_norm_(
        self,
        parameters: Iterable[torch.Tensor] | torch.Tensor,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        error_if_nonfinite: bool = False,
        foreach: bool | None = None,
    ) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` with the same clip factor on every rank.

        Call it where you would call torch's, between ``backward()`` and ``optimizer.step()``.
        Returns the total norm (the same on every rank). Under ``full`` and ``powersgd`` every
        gradient is already averaged, so this is torch's own function (bit for bit). Where some
        gradients stay local (``adaptive``'s non-critical parameters, ``localsgd`` after its
        warm-up), torch's function would compute a different norm on each rank, clip the
        *synced* gradients by different factors and silently drift the replicas that the
        strategy keeps identical. Here the local gradients' share of the norm (sum of
        |g|^p) is averaged across ranks (one small all-reduce; the max for the inf norm) and
        added to the synced gradients' share. Collective: call it on every rank.
        """
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        synced_ids = self.strategy.synced_grad_ids()
        if synced_ids is None or self.config.sync == p.SYNC_NONE or self.world_size == 1:
            return torch.nn.utils.clip_grad_norm_(
                params, max_norm, norm_type, error_if_nonfinite=error_if_nonfinite, foreach=foreach
            )
        with_grad = [q for q in params if q.grad is not None]
        synced = [q.grad for q in with_grad if id(q) in synced_ids and q.grad is not None]
        local = [q.grad for q in with_grad if id(q) not in synced_ids and q.grad is not None]
        get_norm = torch.nn.utils.get_total_norm
        synced_norm = get_norm(synced, norm_type, error_if_nonfinite, foreach)
        local_norm = get_norm(local, norm_type, error_if_nonfinite, foreach)
        share = torch.zeros(1, dtype=torch.float64)
        if math.isinf(norm_type):
            share[0] = float(local_norm)
            dist.all_reduce(share, op=dist.ReduceOp.MAX, group=self.table_group)
            total = max(float(synced_norm), float(share[0]))
        else:
            share[0] = float(local_norm) ** norm_type / self.world_size
            dist.all_reduce(share, group=self.table_group)
            total = (float(synced_norm) ** norm_type + float(share[0])) ** (1.0 / norm_type)
        device = synced[0].device if synced else local[0].device if local else torch.device("cpu")
        total_norm = torch.tensor(total, dtype=torch.float32, device=device)
        torch.nn.utils.clip_grads_with_norm_(with_grad, max_norm, total_norm, foreach)
        return total_norm

    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint must hold to resume this session: the step, the strategy
        that ran and its own state (its period, counters, promoted parameters, ...)."""
        return {"step": self.step, "sync": self.name, "strategy": self.strategy.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (a checkpoint's ``synclane`` entry).

        The strategy's state is restored only when the checkpoint was written under the same
        strategy (a job may be resumed with another one).
        """
        self.set_step(int(state["step"]))
        if state.get("sync") == self.name and "strategy" in state:
            self.strategy.load_state_dict(state["strategy"])

    def close(self) -> None:
        """Finish queued collectives, stop the engine threads and the allocation client, and
        destroy the process groups ``wrap`` made. Safe to call twice; called at exit.
        """
        if self._closed:
            return
        self._closed = True
        stopped = self._finish_agreeing()
        if self.background is not None:
            stopped = self.background.close() and stopped
        stopped = self.engine.close() and stopped
        if self.allocation is not None:
            self.allocation.close()
        if stopped and dist.is_initialized():
            for group in self.groups:
                # A group is already gone when the script destroyed the default group first.
                with contextlib.suppress(ValueError, RuntimeError):
                    dist.destroy_process_group(group)
        self.groups = []

    def _set_table_cadence(self, table: torch.Tensor | None) -> None:
        """When the next table is agreed, for a strategy that does not choose
        (``strategies.base.table_period``): from agreed figures, alike on every rank."""
        step_time = float(table[:, COL["step_time_s"]].max()) if table is not None else 0.0
        interval = 0.0 if self.config.deterministic else self.config.table_interval_s
        self.strategy.table_period = table_period(step_time, interval, alarmed=self.health.alarmed)
        self.strategy.last_table = self.step

    def _probe_if_due(self) -> None:
        """Probe the links every ``probe_every`` steps, whether a table is agreed or not."""
        if self.config.probe_every and self.step % self.config.probe_every == 0:
            self._probe()

    def _probe(self) -> None:
        """Measure the rank-pair link matrix and report it (``link`` messages)."""
        self._settle_table()  # the probes' sends and receives go on the table's group
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

    def _agree(self, outgoing: TableRow) -> tuple[torch.Tensor | None, int]:
        """Return the last agreeing step's table, agreed, and that step (None: this is the
        first since ``wrap``; under ``none``, which never communicates, this step's own
        rows). ``outgoing`` is this step's row (the caller sends it after the strategy's
        ``after_step``, which may give it a ride).

        A table crosses the link while the next steps compute, so no rank waits for the
        others here (measured: a blocking all-reduce cost tiny_gpt's steps 1-2 ms, the
        ranks' step-time jitter). Decisions then act a table later, alike on every rank.
        The strategy may give ``outgoing`` a ride on a collective it starts after this step
        (``TableRow.ride``); else it goes alone on the table's group, not through the
        engine: the engine may still be carrying an overlapped average, and 100 bytes need
        no pacing (they are counted, in the step that sends them).
        """
        if self.config.sync == p.SYNC_NONE:
            return outgoing.table, self.step
        previous = self._agreeing
        if previous is None:
            return None, self.step - 1
        return previous.wait(), previous.step

    def _finish_agreeing(self) -> bool:
        """Wait for the last table on its way alone (30 s at most: a peer may be gone);
        return whether it arrived (none, or one riding the engine's collective, which ends
        with the engine, counts as arrived)."""
        agreeing, self._agreeing = self._agreeing, None
        if agreeing is None or not agreeing.alone:
            return True
        try:
            agreeing.wait(timedelta(seconds=30))
        except RuntimeError:
            return False
        return True

    def _settle_table(self) -> None:
        """Wait until a table on its way alone has arrived (before other traffic on its
        group that is not a collective, and before the group goes); it is used next step."""
        if self._agreeing is not None and self._agreeing.alone:
            self._agreeing.wait()


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
    **ddp_options: Any,
) -> SynclaneDDP:
    """Wrap ``model`` for data-parallel training with the configured sync strategy.

    ``config`` None reads ``RuntimeConfig.from_env()``; ``reporter``/``allocation`` None
    build them from the config (no-ops without a control plane). ``ddp_options`` go to
    ``DistributedDataParallel`` as they are (``find_unused_parameters=True``,
    ``static_graph=True``, ...; a ``bucket_cap_mb`` here wins over the config's).
    ``broadcast_buffers`` is DDP's default (True) except under ``adaptive`` and ``none``,
    whose replicas differ between averages anyway: each rank keeps its own buffers
    (BatchNorm's running statistics), and under ``adaptive`` ``model.session.synchronize()``
    averages them. Requires an initialised default process group (``torchrun`` +
    ``dist.init_process_group``); collective call, run it on every rank. Returns the wrapped
    model; ``model.session`` holds the bookkeeping.

    Without ``optimizer``, call ``model.session.after_optimizer_step()`` after each
    ``optimizer.step()``: ``adaptive`` and ``localsgd`` act there (until it is called,
    ``adaptive`` stays in its warm-up and syncs everything, and ``localsgd`` never averages).
    """
    cfg = config or RuntimeConfig.from_env()
    if not dist.is_initialized():
        raise RuntimeError("wrap() needs torch.distributed initialised (run under torchrun)")
    ranks = dist.get_process_group_ranks(process_group) if process_group is not None else None
    # The engine's own group: its thread's collectives never interleave with the main
    # thread's (gloo matches collectives by order per group). new_group is collective;
    # every rank calls wrap().
    group = new_group(ranks)
    table_group = new_group(ranks)
    background_group = new_group(ranks) if cfg.sync == p.SYNC_ADAPTIVE else None
    # Re-issue of late chunks needs a spare group, and an engine that is the only user of its
    # group: full and adaptive (torch's PowerSGD/local SGD hooks issue on it themselves).
    reissue = cfg.sync in (p.SYNC_FULL, p.SYNC_ADAPTIVE) and cfg.reissue_wait_s is not None
    spare_group = new_group(ranks) if reissue else None
    if reporter is None:
        reporter = Reporter.from_env(cfg)
    if allocation is None:
        allocation = AllocationClient.from_env(cfg).start()
    ddp_kwargs: dict[str, Any] = {
        "process_group": process_group,
        "bucket_cap_mb": bucket_cap_mb(cfg),
        "broadcast_buffers": broadcasts_buffers(cfg.sync),
        **ddp_options,
    }
    ddp = SynclaneDDP(model, **ddp_kwargs)
    _let_compile_split_at_first_bucket_size(ddp)
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
    own = (group, table_group, background_group, spare_group)
    session.groups = [g for g in own if g is not None]
    ddp.session = session
    ddp.register_forward_hook(_capture_loss(session))
    _start_clock_at_first_forward(ddp, session)
    atexit.register(_close_at_exit, weakref.ref(session))
    if optimizer is not None:
        optimizer.register_step_post_hook(lambda *_: session.after_optimizer_step())
    elif cfg.sync in (p.SYNC_ADAPTIVE, p.SYNC_LOCALSGD):
        warnings.warn(
            f"wrap() without optimizer=: call model.session.after_optimizer_step() after each "
            f"optimizer.step(), or pass the optimizer; until then {cfg.sync!r} "
            + (
                "stays in its warm-up and syncs every gradient (and without the optimizer it "
                "cannot average optimizer moments, so it promotes no parameter and has no "
                "fast-link mode)"
                if cfg.sync == p.SYNC_ADAPTIVE
                else "never averages the replicas"
            ),
            RuntimeWarning,
            stacklevel=2,
        )
    return ddp


def _close_at_exit(session_ref: weakref.ref[SyncSession]) -> None:
    """At interpreter exit: close the session, then destroy the default group if the script
    did not (``Checkpointer.close`` does both).

    A script that ends without ``dist.destroy_process_group()`` leaves gloo's worker threads
    alive into interpreter finalization. A gloo thread that completes a Future with a Python
    ``then()`` callback (torch's PowerSGD hook chains its collectives that way) takes the GIL
    to run the callback and again to release it, just *after* the Future's waiter was woken;
    if the interpreter is finalizing by then, Python ends that thread inside C++ and the
    process aborts ("terminate called without an active exception"; seen in a core dump,
    about one exit in twenty under load). Here, in ``atexit``, the interpreter is still whole:
    close, destroy the groups, then sleep a moment with the GIL released so that any such
    thread finishes its callback first. Destroying a gloo group is local to the rank.
    """
    session = session_ref()
    if session is not None:
        session.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    time.sleep(EXIT_GRACE_S)


def _let_compile_split_at_first_bucket_size(ddp: DistributedDataParallel) -> None:
    """Keep ``torch.compile`` working with buckets below DDP's 1 MB first bucket.

    Dynamo's DDPOptimizer splits a compiled graph where DDP's buckets end, reading
    ``ddp.bucket_bytes_cap``, and refuses a cap below DDP's first bucket
    (``dist._DEFAULT_FIRST_BUCKET_BYTES``, "First bucket should be smaller/equal to other
    buckets"), which a ``bucket_cap_mb`` below 1 is. The reducer was built with the real cap
    in the constructor and does not read the attribute again, so raising it here changes only
    where compiled graphs split (pieces of at least 1 MB; DDP's small buckets still leave as
    each piece's backward ends).
    """
    first = int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 0))
    if ddp.bucket_bytes_cap < first:
        ddp.bucket_bytes_cap = first


def _start_clock_at_first_forward(ddp: nn.Module, session: SyncSession) -> None:
    """Register a forward pre-hook that starts the session's clock once, then goes."""

    def hook(_module: nn.Module, _inputs: Any) -> None:
        session.start_clock()
        handle.remove()

    handle = ddp.register_forward_pre_hook(hook)


def _capture_loss(session: SyncSession) -> Any:
    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor) and output.numel() == 1:
            session._loss = output.detach()

    return hook
