"""``adaptive``: selective sync of critical gradients every step, the rest averaged every H.

The per-step half; the comm hook half is ``hooks.adaptive``.
"""

from __future__ import annotations

import math
import re
import statistics
import warnings
from collections import deque
from typing import Any, NamedTuple

import torch
from torch.nn.parallel import DistributedDataParallel

from workers.runtime import protocol as p
from workers.runtime.compress import INT8_SHARE, ErrorFeedback, wire_dtype
from workers.runtime.config import RuntimeConfig
from workers.runtime.drift import DriftMonitor, relative_distance
from workers.runtime.engine import BACKGROUND_CHUNK_BYTES, FUSE_BYTES, MAX_CHUNK_BYTES, CommEngine
from workers.runtime.hooks.adaptive import SelectiveState, selective_hook
from workers.runtime.reporter import Reporter
from workers.runtime.stats import ring_allreduce_wire_bytes
from workers.runtime.strategies.base import COL, Strategy, average, flat
from workers.runtime.table import TableRow

# Parameters whose name matches are critical by default: attention projections.
CRITICAL_NAME = re.compile(
    r"(^|\.)(attn|attention|self_attn)(\.|$)|(q_proj|k_proj|v_proj|out_proj|qkv)"
)

# adaptive's DDP bucket size: during selective sync its critical slices leave bucket by
# bucket, so smaller buckets than torch's (measured against 64 KB and 256 KB:
# ``strategies.bucket_cap_mb``). The other strategies keep DDP's own buckets.
ADAPTIVE_BUCKET_CAP_MB = 1.0
# While adaptive averages everything, the engine fuses what the hook sends up to its default
# bucket size (a smaller SYNCLANE_BUCKET_CAP_MB would otherwise cost one collective a bucket).
SYNC_ALL_FUSE_BYTES = int(ADAPTIVE_BUCKET_CAP_MB * 2**20)

# Fast-link mode: sync everything while full sync's link time is below this share of a
# step, back to selective sync above the second (hysteresis against flapping).
FULL_SYNC_BELOW = 0.2
SELECTIVE_ABOVE = 0.3

# While everything is averaged (warm-up, fast-link mode), gradients go in the wire format
# only where that saves at least this share of a step's time against fp32; else in fp32,
# as full sends them. Measured at 1 Gbit/s (docs/benchmarks.md): bf16 throughout was
# faster on tiny_gpt (455 KB of gradients a step), fp32 throughout on topics_encoder and
# shapes_cnn (79 and 9 KB); at a 10% threshold tiny_gpt flipped between the two formats.
BF16_MIN_SAVING = 0.05
# With compress "auto", critical gradients go in blockwise int8 instead of bf16 from when
# that would save at least INT8_ABOVE of a step's time on the link, until it would save
# under INT8_BELOW (hysteresis: each switch drops the error-feedback residuals). int8 costs
# CPU time (quantizing on both sides of a reduce-scatter, a second collective) that short
# steps on fast links do not repay. Measured (docs/benchmarks.md, seed regime, 2 ranks, 2
# seeds), time to target against full for int8 throughout / bf16 throughout: zoo:rnn_lm
# 1.58x / 1.76x (with a worse loss under int8), shapes_cnn 1.07x / 1.55x; tiny_gpt under
# this rule (int8) 2.09x against bf16's 1.98x. A single 5% threshold switched back and
# forth on zoo:rnn_lm and cost it.
INT8_ABOVE = 0.08
INT8_BELOW = 0.05
# Share of a step's time that periodic parameter averaging may use on the current link;
# H grows when averaging would exceed it (the allocation bound on H). Measured against a
# quarter (the default before; bench_sync's arm adaptive-budget25, docs/benchmarks.md,
# seed regime, 2 ranks): a tenth reached full's loss 1-13% sooner on the four models where
# the bound binds, with fewer bytes a step; tiny_gpt's H follows its loss either way.
AVERAGING_BUDGET = 0.1
# A parameter is promoted when its movement between syncs exceeds this share of the drift threshold.
PROMOTION_THRESHOLD = 0.25
# A promoted parameter is demoted only when its score falls under this share of the
# promotion threshold (hysteresis: each promotion costs an optimizer-state average).
DEMOTION_SHARE = 0.5
# The step time the link decisions read: the median of the agreed step times of the last this
# many steps (a table covering several steps counts once for each: its mean, as many times).
# A step's time runs from the end of the previous one, so it includes whatever the script did
# in between (an evaluation, a checkpoint, logging); one such step read as it is made the link
# look idle (measured: an evaluation every 10 steps put adaptive in fast-link mode each time).
STEP_TIME_WINDOW = 9
# The background lane's chunks, in seconds of the agreed link (at least the lane's default
# size): a step's gradients wait behind at most one. A fixed 64 KB (0.5 ms at 1,150 Mbit/s)
# cut zoo:bn_mlp's 819 KB averages into 13 collectives of 0.4-5 ms each, the lane's thread
# waiting for the CPU and the GIL between them (trace_sync at 1,150 Mbit/s: 12.2-14.4 ms a
# step with 64 KB chunks, 10.6-11.0 ms with these; 20 ms chunks measured the same as 5 ms
# on tiny_gpt and topics_encoder).
BACKGROUND_CHUNK_S = 0.005
# During selective sync, the critical slices of consecutive buckets are fused until they
# are this much of the agreed link's time (at least the engine's FUSE_BYTES). Each
# collective is a meeting of the ranks, up to 7 ms apart on 2 shared cores (trace_sync); a
# slice of a fraction of a ms of wire sent alone pays a meeting and hides little. The fixed
# 16 KB was a cliff: on zoo:bn_mlp at 1,200 Mbit/s the first bucket's slices were 15.4 KB
# and went with the last bucket's, until a promoted 640-element parameter made them 16.7 KB
# and a collective of their own (trace_sync: 10.7-11.1 against 10.1-10.2 ms a step with 2
# ranks, 31.8-32.8 against 28.0-28.1 ms with 4).
CRITICAL_FUSE_S = 0.002
# The key of the periodic averages' residual in ``Adaptive.delta_feedback``.
DELTA_KEY = "noncritical"
# The key of the critical parameters' per-step averages' residual (``overlap_critical``).
CRITICAL_KEY = "critical"
# Margin on the steps an average is expected to travel before it is applied (one applied
# too early is waited for; one applied later is staler, which costs loss).
LAG_MARGIN = 1.25


class Adaptive(Strategy):
    """Adaptive selective sync.

    * **Critical** parameters (attention projections by default, plus any promoted by
      score) are averaged every ``critical_period`` steps (``CRITICAL_PERIOD``, 2, unset).
      By default (``overlap_critical``) as parameters, off the step's path: every gradient
      stays local in backward; after every P-th optimizer step their movement since their
      last average goes on the foreground engine (idle otherwise; the lane yields to it)
      while the next step computes, and is applied after that step's optimizer step
      (``_launch_critical``, ``_apply_critical``), keeping the step made meanwhile:
      replicas differ by their local steps since. Every second step rather than every one
      (measured, docs/benchmarks.md): each average costs the CPU and the ranks a meeting
      that the 2-core benchmark machine's short steps feel, and the loss at the budget
      stayed under full's; every third step was measured too and not kept. With
      ``overlap_critical`` off, their gradients are averaged in the comm hook every step
      instead (replicas identical). A model with no parameter matching the pattern gets
      a measured set instead: at the end of warm-up,
      the parameters that moved most since the start (update-to-weight ratio, agreed across
      ranks), up to ``critical_share`` of the bytes (``_choose_measured_critical``).
    * **Non-critical** parameters keep their local gradient and are averaged as parameters
      every H steps. H follows AdaComm: ``H = ceil(H0 * sqrt(loss / loss0))`` (shrinks as
      the loss falls), bounded below by the allocation (averaging may take at most
      ``AVERAGING_BUDGET`` of a step's time on the current link) and above by
      ``max_sync_period``.
    * **Score**: at each global sync, each non-critical parameter's relative movement since
      the last sync (its update-to-weight ratio over H steps, averaged across ranks in the
      same all-reduce as the parameters) divided by its bytes. With a ``promotion_budget``
      (0 by default: measured, it did not pay), the highest-scoring ones are promoted to
      critical while their bytes fit in that share of all parameter bytes. Promoted
      parameters' movement is averaged along too, and a promoted parameter is demoted when
      it falls under ``DEMOTION_SHARE`` of the threshold, so promotion is re-evaluated at
      every sync as training goes without flapping.
    * **Drift**: distance of non-critical parameters from the other replicas, estimated as
      their distance from the last synced copy times the share of it the last average found
      to be disagreement (``local_drift``); above the threshold the ``DriftMonitor`` raises
      ``sync_drift`` and forces H = 1 until it recovers. A drift measured at the step an
      average started, or while one was in flight, is of parameters that average repairs:
      it raises, clears and starts nothing.
    * **Background averaging**: the average of step s's snapshot travels on the background
      lane (its own group and thread, yielding the link to the step's gradients) while the
      next steps compute, and is applied at step s + lag: ``average - snapshot`` is added
      to the parameters, keeping the local progress made meanwhile (as Overlap-Local-SGD).
      It goes in chunks of ``BACKGROUND_CHUNK_S`` of the agreed link's time
      (``lane_chunk_bytes``), so a step's gradients wait behind at most one and a fast link
      is not cut into fractions of a ms (each chunk is a collective, and a wait for the CPU
      between them).
      ``lag`` is the number of steps the link's idle time (step time minus the critical
      gradients' link time) needs to carry the average, with a margin, at least 1 and at
      most H; it comes from agreed figures, so every rank applies (and reclassifies) at the
      same step. An average that is late by then is waited for. (Measured in single runs:
      applying later, when the previous average had arrived, removed the waits but not the
      time, which the saturated CPU spent elsewhere, and cost 0.3-1% val loss from staler
      averages.)
    * **Optimizer state**: with ``overlap_critical`` off, critical parameters get identical
      gradients, so their optimizer moments stay identical on all ranks; by default every
      parameter keeps per-rank moments. Non-critical parameters keep per-rank moments, as
      in torch's post-local-SGD: they are statistics of local gradients, and averaging them
      would double the averaging traffic. When a parameter is promoted, its optimizer state
      is averaged once (with the parameters), so critical replicas are identical from then on.
    * **Local step scale**: a second-moment optimizer (Adam, RMSprop, ...) fed a gradient from
      1/n of the global batch sees its noise variance n times larger, so where noise
      dominates its second moment is n times larger and its steps sqrt(n) times shorter
      than full sync's: the non-critical parameters learn slower (measured: most of the
      val-loss gap). Each local step of a non-critical parameter is therefore scaled by
      ``local_step_scale``: by default n^0.8 (``LOCAL_STEP_EXPONENT``) for such optimizers,
      1 for SGD, whose local steps are already unbiased. The exponent is measured, not
      derived: n^0.8 reached full sync's loss sooner than sqrt(n) on four of the five
      benchmark models at 2 and at 4 ranks (docs/benchmarks.md); one reading is that each periodic average pulls a
      replica's own progress back toward the others', so its local steps must go further
      than the noise argument alone asks. Critical parameters averaged after the step
      (``overlap_critical``) take sqrt(n) (``CRITICAL_STEP_EXPONENT``), the noise argument's
      factor: n^0.8 ended 1.8% over full's loss on zoo:bn_mlp where sqrt(n) ended 3% under
      it, averaged every step (docs/benchmarks.md). It needs the optimizer (passed to
      ``wrap``). Where the optimizer's step is linear in its learning rate, the factor
      rides on the learning rate for the step (``_before_optimizer_step``): a pre-step
      hook registered after ``wrap`` sees it scaled.
    * **Fusion of critical slices**: during selective sync the engine fuses consecutive
      buckets' critical slices until they are ``CRITICAL_FUSE_S`` of the agreed link's
      time (``critical_fuse_bytes``), so slices of a fraction of a ms of wire do not each
      pay a meeting of the ranks; the engine's fixed ``FUSE_BYTES`` with no known rate and
      in deterministic mode.
    * **Late critical gradients** (``late_critical``, off by default; with
      ``overlap_critical`` off): step t's critical gradient average is applied at step t+1,
      so backward does not wait for it (``hooks.adaptive``).
    * **Outer momentum** (``outer_momentum`` beta, 0 by default): each average moves the
      synced copy by the mean delta plus beta times the previous average's step (SlowMo);
      each replica's parameters move by the same extra. Laid out as the deltas' residual,
      dropped when everything is averaged again (warm-up, fast-link mode).
    * Warm-up (``warmup_steps``): everything is averaged every step, like ``full``.
    * **Fast link**: while full sync's link time (all gradient bytes in the wire format at the
      agreed rate) is under ``FULL_SYNC_BELOW`` of the step time, selective sync would save
      little and cost its bookkeeping and some loss, so everything is averaged every step
      (parameters and optimizer moments are averaged once on entry); selective sync resumes
      above ``SELECTIVE_ABOVE``. The rule counts bytes in the wire format. With no known
      rate (no emulated link, no allocation) selective sync stays on, and without the
      optimizer too (its moments could not be averaged).
    * **Format while everything is averaged** (warm-up, fast-link mode): fp32, as ``full``
      sends it, where the wire format would save under ``BF16_MIN_SAVING`` of a step's time
      (small models, fast links); the wire format otherwise, and with no known rate. The
      first two steps, decided before any step time is agreed, go in fp32: on a fast link
      adaptive's warm-up and fast-link mode then train exactly as ``full`` (2 ranks).
    * **Format of the critical gradients** otherwise (``overlap_critical`` off; the
      critical parameters' movement goes in the wire format): the wire format; with ``compress``
      ``auto`` (the default) blockwise int8 instead (``compress.Int8Feedback``, about half
      of bf16's bytes) where that saves enough of a step's time on the link (from
      ``INT8_ABOVE`` until under ``INT8_BELOW``), decided each step from the agreed table;
      always with ``int8``.
    """

    name = p.SYNC_ADAPTIVE

    def __init__(
        self,
        *,
        engine: CommEngine,
        config: RuntimeConfig,
        reporter: Reporter | None,
        optimizer: torch.optim.Optimizer | None,
        background: CommEngine | None = None,
    ) -> None:
        super().__init__(engine=engine, config=config)
        self.reporter = reporter
        self.optimizer = optimizer
        self.background = background or engine
        self.step_scale = local_step_scale(config, optimizer, self.world_size)
        self.critical_step_scale = local_step_scale(
            config, optimizer, self.world_size, exponent=CRITICAL_STEP_EXPONENT
        )
        self._before_step: list[tuple[list[torch.Tensor], list[torch.Tensor], float]] | None = None
        self._saved_lrs: list[float] | None = None  # the groups' own lrs, while scaled for a step
        self.fast_link = False  # syncing everything because the link is fast (see after_step)
        self.drift = DriftMonitor(threshold=config.drift_threshold, reporter=reporter)
        self.period = config.sync_period
        self.last_sync_step = 0
        self.loss0: float | None = None
        self.loss_ema: float | None = None
        self.scores: dict[str, float] = {}
        self.step_times: deque[float] = deque(maxlen=STEP_TIME_WINDOW)  # agreed (slowest rank)
        self._table_of = 0  # the step of the last table read
        self._pending: _PendingAverage | None = None
        # The agreed tables' steps (see prepare): the one the next after_step reads, and this
        # step's; each with whether an average was in flight when its drift was measured.
        self._measured: tuple[tuple[int, bool], tuple[int, bool]] = ((0, False), (0, False))
        # The share of this replica's movement since an average that was disagreement with
        # the others, measured at the last average (1 until one was: all of it).
        self.apart_share = 1.0
        dtype = wire_dtype(config.compress)
        self.state: SelectiveState = SelectiveState(
            engine=engine, critical=set(), feedback=ErrorFeedback(dtype)
        )
        self.state.late = config.late_critical
        self.state.overlap = config.overlap_critical
        self._critical_average: _CriticalAverage | None = None  # in flight (overlap_critical)
        self.critical_period = config.critical_period or CRITICAL_PERIOD  # steps between them
        self.state.set_quantize(config.compress == "int8")  # "auto": decided each step
        # The periodic averages' deltas go in the same wire format, with their own residual
        # (one, under DELTA_KEY, laid out as the non-critical set was at the last average).
        self.delta_feedback = ErrorFeedback(dtype)
        self._delta_layout: list[tuple[str, int]] = []  # names and sizes, end to end
        # Outer momentum (``outer_momentum``): the previous averages' steps, laid out as the
        # deltas' residual; the same on every rank (made of reduced figures only).
        self.outer: torch.Tensor | None = None
        # Wire bytes per parameter byte: what the link figures below count.
        self.wire_share = 1.0 if dtype is None else dtype.itemsize / 4
        # The model's parameters and their classes, known once registered.
        self.named: list[tuple[str, torch.nn.Parameter]] = []
        self.by_name: dict[str, torch.nn.Parameter] = {}
        self.base_critical: set[str] = set()  # critical by name or measured (never demoted)
        self.measure_critical = False  # no name matched: choose by measured movement (warm-up)
        self.measured_critical: list[str] = []  # chosen that way (kept in checkpoints)
        self.loss_warned = False
        self.critical_names: set[str] = set()  # base + promoted
        self.noncritical: list[str] = []  # set by _set_noncritical, with its sizes
        self._noncritical_numel = 0
        self._noncritical_bytes = 0
        self.synced: dict[str, torch.Tensor] = {}  # flat copies at the last global sync
        self._synced_norm: float | None = None  # of the non-critical ones (None: not yet taken)
        self.total_bytes = 0
        self.total_numel = 0
        self._rate: float | None = None  # this step's agreed link rate, B/s (None: unknown)

    def register(self, ddp: DistributedDataParallel) -> None:
        self.named = [(n, q) for n, q in ddp.module.named_parameters() if q.requires_grad]
        self.by_name = dict(self.named)
        # Buffers stay each rank's own between synchronize() calls (BROADCAST_BUFFERS).
        self.float_buffers = [b for b in ddp.module.buffers() if b.is_floating_point()]
        pattern = re.compile(self.config.critical) if self.config.critical else CRITICAL_NAME
        self.base_critical = {n for n, _ in self.named if pattern.search(n)}
        self.measure_critical = not self.base_critical
        if self.measure_critical and self._speaks():
            what = (
                f"SYNCLANE_CRITICAL={self.config.critical!r}"
                if self.config.critical
                else ("the default pattern (attention layers)")
            )
            warnings.warn(
                f"adaptive: no parameter name matches {what}; the parameters that move most "
                f"during the {self.config.warmup_steps} warm-up steps (update-to-weight ratio) "
                f"become critical, up to {self.config.critical_share:.0%} of the parameter bytes "
                "(SYNCLANE_CRITICAL_SHARE). "
                "Set SYNCLANE_CRITICAL to a regex of parameter names to choose them yourself.",
                RuntimeWarning,
                stacklevel=3,
            )
        self.critical_names = set(self.base_critical)
        self.total_bytes = sum(q.numel() * q.element_size() for _, q in self.named)
        self.total_numel = sum(q.numel() for _, q in self.named)
        self.state.set_critical(self._ids(self.critical_names))
        ddp.register_comm_hook(self.state, selective_hook)
        self._set_sync_all(True)  # warm-up
        self.state.exact = self._fp32_is_cheap()
        self._snapshot()
        scaled = self.step_scale != 1.0 or self.critical_step_scale != 1.0
        if self.optimizer is not None and scaled:
            self.optimizer.register_step_pre_hook(lambda *_: self._before_optimizer_step())

    def _speaks(self) -> bool:
        """Whether this rank writes warnings (the metrics rank: ranks decide alike)."""
        return self.engine.rank == self.config.metrics_rank

    def synced_grad_ids(self) -> set[int] | None:
        if self.state.sync_all:
            return None
        return set() if self.state.overlap else self._ids(self.critical_names)

    # ------------------------------------------------------------ per step

    def prepare(self, step: int) -> None:
        self._scale_local_step()
        critical = self._critical_average
        if critical is not None and step >= critical.apply_at:
            self._apply_critical()
        if self._pending is not None and step >= self._pending.apply_at:
            self._apply_pending()
        if self.agrees_at(step):
            # This step's drift (measured next) goes into a table that the next agreeing
            # step reads: its step, and whether an average in flight will repair that drift.
            self._measured = (self._measured[1], (step, self._pending is not None))

    def agrees_at(self, step: int) -> bool:
        """At the steps whose critical average starts (``AGREE_EVERY_STEP``: at every
        step); while everything is averaged (warm-up, fast-link mode) as ``full`` does
        (``Strategy.agrees_at``) and at the last step of warm-up, where
        selective sync starts; every step when critical gradients go in backward."""
        if AGREE_EVERY_STEP or not self.state.overlap:
            return True
        if self.state.sync_all:
            return super().agrees_at(step) or step == self.config.warmup_steps
        return step % self.critical_period == 0

    def local_drift(self) -> float:
        """``apart_share * ||w - w_sync|| / ||w_sync||`` over the non-critical parameters.

        The distance moved since the last sync, per parameter (fused ops, no concatenated
        copies; the reference norm is kept until the next sync), times the share of that
        movement the last average found to be disagreement: ``||average - snapshot||`` over
        ``||snapshot - w_sync||``, at most 1 (1 until an average measured it). Replicas
        that move alike (the same data, or a direction all their gradients share) do not
        drift; on zoo:bn_mlp the movement alone raised sync_drift on a fifth of the steps.
        Between averages the share is the last one's: a replica that starts diverging shows
        it through its movement, at the share measured before.
        """
        if self.state.sync_all or not self.noncritical:
            return 0.0
        synced = [self.synced[n] for n in self.noncritical]
        if self._synced_norm is None:
            self._synced_norm = _norm_of(torch._foreach_norm(synced))
        if self._synced_norm == 0.0:
            return 0.0
        current = [q.detach().reshape(-1) for q in self.noncritical_params()]
        distance = _norm_of(torch._foreach_norm(torch._foreach_sub(current, synced)))
        return self.apart_share * distance / self._synced_norm

    def after_step(
        self, step: int, table: torch.Tensor | None, outgoing: TableRow
    ) -> dict[str, float]:
        # The first step has no agreed figures yet: it decides as with no timing and no loss.
        rows = [] if table is None else table.tolist()
        if rows:
            of = self._measured[0][0]  # the step the table is of, and the steps it covers:
            covered, self._table_of = min(max(1, of - self._table_of), STEP_TIME_WINDOW), of
            self.step_times.extend([max(row[COL["step_time_s"]] for row in rows)] * covered)
        self._agree_rate(rows)
        figures = self._decide(step, rows)
        self._set_fuse_bytes()  # the agreed rate may have changed
        # The formats of the next step's gradients (agreed): while everything is averaged,
        # and of the critical gradients otherwise.
        self.state.exact = self.state.sync_all and self._fp32_is_cheap()
        if self.config.compress == "auto":
            self.state.set_quantize(self._int8_pays())
        if self.state.overlap and not self.state.sync_all and step % self.critical_period == 0:
            self._launch_critical(step, outgoing)  # the table rides it
        return figures

    def _agree_rate(self, rows: list[list[float]]) -> None:
        """Take the slowest rank's link rate from the agreed table's rows (0: none known)."""
        rates = [row[COL["rate_Bps"]] for row in rows if row[COL["rate_Bps"]] > 0]
        self._rate = min(rates) if rates else None

    def _decide(self, step: int, rows: list[list[float]]) -> dict[str, float]:
        """Act on the agreed table: modes, the sync period, averages (see the class doc)."""
        measured, covered = self._measured[0]  # the step the table is of (see prepare)
        drifts = [row[COL["drift"]] for row in rows]
        grad_norms = [row[COL["grad_norm"]] for row in rows]
        losses = [v for v in (row[COL["loss"]] for row in rows) if math.isfinite(v)]
        if losses:
            mean = sum(losses) / len(losses)
            self.loss_ema = mean if self.loss_ema is None else 0.8 * self.loss_ema + 0.2 * mean
        if step < self.config.warmup_steps:
            return self._figures()
        if self.loss_ema is None and not self.loss_warned:
            self.loss_warned = True  # agreed: every rank sees the same table
            if self._speaks():
                warnings.warn(
                    f"adaptive has seen no loss in {step} steps, so its sync period cannot "
                    "follow the loss (it stays at SYNCLANE_SYNC_PERIOD). When forward does "
                    "not return the loss, call model.session.note_loss(loss) each step.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        share = self._full_sync_share()
        if self.state.sync_all:
            stay = SELECTIVE_ABOVE if self.fast_link else FULL_SYNC_BELOW
            if share is not None and share < stay and self.optimizer is not None:
                # The link is cheap: keep syncing everything (drift is 0; an alarm raised
                # before can clear). Warm-up that ends on such a link goes straight on in
                # fast-link mode: its replicas and moments are already identical.
                self.fast_link = True
                self.drift.update(
                    step=measured, drifts=drifts, grad_norms=grad_norms, losses=losses
                )
                return self._figures()
            # Warm-up (or fast-link mode) ends: replicas are identical, start selective sync.
            if self.measure_critical and not self.measured_critical:
                self._choose_measured_critical()
            self._set_sync_all(False)
            self.loss0 = self.loss0 or self.loss_ema
            self.last_sync_step = step
            self._snapshot()
            return self._figures()
        if share is not None and share < FULL_SYNC_BELOW and self.optimizer is not None:
            # Full sync costs little on this link now: selective sync would buy nothing.
            # Make replicas and their optimizer moments identical, then sync everything.
            self._apply_critical()
            self._apply_pending()
            self._average_optimizer_state({n for n, _ in self.named})
            self._snapshot()
            self._set_sync_all(True, fast_link=True)
            return self._figures()
        # Alarms name the step whose drift was measured. When an average started at that
        # step or was in flight then, the drift is of parameters it repairs: no alarm, no
        # second average (before this a periodic average whose step had drifted past the
        # threshold was followed a step later by an enhanced one: a quarter of zoo:bn_mlp's
        # steps were enhanced).
        enhancing = self.drift.update(
            step=measured,
            drifts=drifts,
            grad_norms=grad_norms,
            losses=losses,
            covered=covered or measured == self.last_sync_step,
        )
        if enhancing or step - self.last_sync_step >= self.period:
            self._apply_pending()  # a new average starts from the last one (rarely waits)
            self._adapt_period()
            self._launch_sync(step, lag=1 if enhancing else self._lag())
        return self._figures()

    def synchronize(self) -> None:
        """Average the parameters and the floating-point buffers (e.g. BatchNorm's running
        statistics, each rank's own since DDP does not broadcast them: BROADCAST_BUFFERS).
        Integer buffers (BatchNorm's batch count) advance alike on every rank."""
        self._apply_critical()
        self._apply_pending()
        average(self.engine, [*(q for _, q in self.named), *self.float_buffers])
        self._snapshot()

    # ------------------------------------------------------------ internals

    def _set_sync_all(self, on: bool, *, fast_link: bool = False) -> None:
        """Average every gradient every step (warm-up, fast link), or only critical ones.

        While everything is averaged the engine fuses buckets up to ``full``'s bucket size:
        buckets smaller than that (``bucket_cap_mb`` below 1) would otherwise cost one
        collective each, more than their overlap saves on a fast link (measured with the
        64 KB buckets adaptive had then: 0.70x of full with 4 ranks at 1 Gbit/s before this). Called between
        steps at the same step on every rank, so the ranks' collectives still match.
        """
        self.state.sync_all = on
        if on:
            self.state.drop_late()  # every bucket is averaged on time from now on
            self.outer = None  # no periodic averages until selective sync resumes
        self.fast_link = fast_link
        self._set_fuse_bytes()

    def _set_fuse_bytes(self) -> None:
        """How much the engine fuses: full's bucket size while everything is averaged, else
        ``critical_fuse_bytes`` at the agreed rate (agreed: every rank fuses alike)."""
        if self.state.sync_all:
            self.engine.fuse_bytes = SYNC_ALL_FUSE_BYTES
            return
        rate = None if self.config.deterministic else self._rate
        self.engine.fuse_bytes = critical_fuse_bytes(rate, self.world_size)

    def noncritical_params(self) -> list[torch.Tensor]:
        return [self.by_name[n] for n in self.noncritical]

    def state_dict(self) -> dict[str, Any]:
        """The sync period and its clock, the loss baseline, scores and promoted parameters,
        the drift's disagreement share, and the outer momentum (``outer_momentum``) with its
        layout.

        Without them a resumed run would restart at the initial period and re-learn which
        parameters to promote. The hook's sync-everything mode is not kept: the first step
        after a resume decides it again from the agreed table.
        """
        outer = {}
        if self.outer is not None:
            outer = {"outer": self.outer.clone(), "outer_layout": list(self._delta_layout)}
        return {
            "period": self.period,
            "last_sync_step": self.last_sync_step,
            "loss0": self.loss0,
            "loss_ema": self.loss_ema,
            "scores": dict(self.scores),
            "promoted": sorted(self.critical_names - self.base_critical),
            "measured_critical": list(self.measured_critical),
            "apart_share": self.apart_share,
            **outer,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.period = int(state["period"])
        self.last_sync_step = int(state["last_sync_step"])
        self.loss0, self.loss_ema = state["loss0"], state["loss_ema"]
        self.apart_share = float(state.get("apart_share", 1.0))  # absent before it was kept
        self.scores = {n: float(v) for n, v in state["scores"].items() if n in self.by_name}
        promoted = {n for n in state["promoted"] if n in self.by_name}
        measured = [n for n in state.get("measured_critical", ()) if n in self.by_name]
        if measured:
            self.base_critical = set(measured)
            self.measured_critical = measured
        self.critical_names = self.base_critical | promoted
        self.state.set_critical(self._ids(self.critical_names))
        if "outer" in state:  # laid out as then; the next average lays it out as it is
            self._delta_layout = [(n, int(k)) for n, k in state["outer_layout"]]
            device = self.named[0][1].device if self.named else None  # saved on the CPU
            self.outer = torch.as_tensor(state["outer"]).to(device, torch.float32, copy=True)

    def _choose_measured_critical(self) -> None:
        """Make the parameters that moved most since ``register`` critical (no name matched).

        Movement is the relative distance from the initial values (``synced`` holds them
        until the first selective step), averaged across ranks so all agree even without a
        warm-up; greedy by movement, within ``critical_share`` of the bytes.
        """
        moved = torch.tensor(
            [relative_distance(q.detach().reshape(-1), self.synced[n]) for n, q in self.named],
            dtype=torch.float64,
        ).div_(self.world_size)
        self.engine.allreduce(moved)
        budget = self.config.critical_share * self.total_bytes
        chosen: list[str] = []
        order = sorted(range(len(self.named)), key=lambda i: (-float(moved[i]), i))
        for i in order:
            name, q = self.named[i]
            size = q.numel() * q.element_size()
            if size <= budget and float(moved[i]) > 0:
                chosen.append(name)
                budget -= size
        self._set_measured_critical(chosen)

    def _set_measured_critical(self, names: list[str]) -> None:
        self.measured_critical = sorted(names)
        promoted = self.critical_names - self.base_critical
        self.base_critical = set(names)
        self.critical_names = self.base_critical | promoted
        self.state.set_critical(self._ids(self.critical_names))

    def _ids(self, names: set[str]) -> set[int]:
        return {id(q) for n, q in self.named if n in names}

    def _snapshot(self) -> None:
        """Take the current parameters as the last globally synced copy.

        Called when the replicas were just made identical, so the deltas' residuals, already
        contained in what was averaged, are dropped.
        """
        self.delta_feedback.clear()
        self.synced = {n: q.detach().reshape(-1).clone() for n, q in self.named}
        self._set_noncritical()

    def _set_noncritical(self) -> None:
        """Take the parameters outside the critical set, in model order, and their sizes
        (after the critical set or the synced copies changed)."""
        self.noncritical = [n for n, _ in self.named if n not in self.critical_names]
        params = self.noncritical_params()
        self._noncritical_numel = sum(q.numel() for q in params)
        self._noncritical_bytes = sum(q.numel() * q.element_size() for q in params)
        self._synced_norm = None

    def _link_seconds(self) -> _LinkSeconds | None:
        """Link times at the agreed rate (the slowest rank's; None: no rate), of the
        bytes adaptive sends: in its wire format (``compress``), against the step time (the
        median of the recent agreed ones, ``STEP_TIME_WINDOW``).

        None in deterministic mode too: every decision that reads them (fast-link mode, the
        allocation's bound on H, the lag of an average) then takes its no-timing default.
        """
        if self.config.deterministic:
            return None
        rate = self._rate
        step_time = statistics.median(self.step_times) if self.step_times else 0.0
        if rate is None or step_time <= 0:
            return None
        share = self.wire_share  # gradients and averages go in the wire format
        noncritical = ring_allreduce_wire_bytes(
            int(share * self._noncritical_bytes), self.world_size
        )
        everything = ring_allreduce_wire_bytes(int(share * self.total_bytes), self.world_size)
        critical = self._critical_bytes() * (INT8_SHARE if self.state.quantize else share)
        return _LinkSeconds(
            step=step_time,
            full_sync=everything / rate,
            noncritical=noncritical / rate,
            critical=ring_allreduce_wire_bytes(int(critical), self.world_size) / rate,
            per_byte=_ring_share(self.world_size) / rate,
        )

    def _critical_bytes(self) -> int:
        return self.total_bytes - self._noncritical_bytes

    def _full_sync_share(self) -> float | None:
        """Full sync's link time as a share of the step time (None: link rate unknown)."""
        link = self._link_seconds()
        return None if link is None else link.full_sync / link.step

    def _fp32_is_cheap(self) -> bool:
        """Whether averaging everything in fp32 costs under ``BF16_MIN_SAVING`` of a step more
        link time than the wire format would. True before the first agreed step time (steps
        1 and 2 go as ``full`` sends them, so on a fast link adaptive trains exactly as full
        from the first step); False with no known rate or timing after that."""
        if not self.step_times:
            return True
        link = self._link_seconds()
        if link is None:
            return False
        saving = link.full_sync / self.wire_share - link.full_sync  # 0 when the format is fp32
        return saving < BF16_MIN_SAVING * link.step

    def _int8_pays(self) -> bool:
        """Whether critical gradients should go in int8 rather than the wire dtype: the link
        time int8 would save, as a share of a step, is at least ``INT8_ABOVE`` (or, while
        they already go in int8, ``INT8_BELOW``). False with no known rate or timing, and
        while everything is averaged."""
        if self.state.sync_all or self.state.overlap:
            return False
        link = self._link_seconds()
        if link is None:
            return False
        saved = self._critical_bytes() * (self.wire_share - INT8_SHARE) * link.per_byte
        return saved >= (INT8_BELOW if self.state.quantize else INT8_ABOVE) * link.step

    def _before_optimizer_step(self) -> None:
        """Optimizer pre-step hook: arrange for each locally stepped parameter's step (the
        non-critical ones; the critical ones too with ``overlap_critical``) to be scaled by
        its factor.

        Where every parameter the optimizer steps is locally stepped and the step is linear
        in the learning rate (``_lr_factor``), every group's learning rate is multiplied for
        this one step by the factor of the most parameter elements (``_scale_local_step``
        puts it back), and only the other parameters' values are kept, to be corrected by
        their factor's ratio to it, rather than every parameter cloned and interpolated
        (measured on tiny_gpt: 0.06-0.08 against 0.11-0.13 ms a step to apply the scale;
        docs/benchmarks.md). Otherwise the scaled parameters' values are kept.
        """
        self._restore_lrs()  # a step that raised left them scaled
        if self.state.sync_all:
            self._before_step = None
            return
        groups = [(self.noncritical_params(), self.step_scale)]
        if self.state.overlap:
            critical: list[torch.Tensor] = [q for n, q in self.named if n in self.critical_names]
            groups.append((critical, self.critical_step_scale))
        factor = self._lr_factor(groups)
        if factor != 1.0:
            assert self.optimizer is not None  # _lr_factor is 1 without one
            self._saved_lrs = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * factor
        self._before_step = [
            (params, [q.detach().clone() for q in params], scale / factor)
            for params, scale in groups
            if params and scale != factor
        ]

    def _lr_factor(self, groups: list[tuple[list[torch.Tensor], float]]) -> float:
        """The factor on every learning rate for the next step: the scale of the group with
        the most elements, where the optimizer's step is linear in its (float) learning
        rate and every parameter it will step is in a group; else 1."""
        optimizer = self.optimizer
        if optimizer is None or type(optimizer) not in _LR_LINEAR:
            return 1.0
        if any(isinstance(g["lr"], torch.Tensor) for g in optimizer.param_groups):
            return 1.0  # a tensor lr (capturable, fused) is read in place: leave it
        grouped = {id(q) for params, _ in groups for q in params}
        stepped = (q for g in optimizer.param_groups for q in g["params"] if q.grad is not None)
        if any(id(q) not in grouped for q in stepped):
            return 1.0  # its step must stay as the optimizer takes it
        return max(groups, key=lambda group: sum(q.numel() for q in group[0]))[1]

    def _restore_lrs(self) -> None:
        saved, self._saved_lrs = self._saved_lrs, None
        if saved is not None and self.optimizer is not None:
            for g, lr in zip(self.optimizer.param_groups, saved, strict=True):
                g["lr"] = lr

    def _scale_local_step(self) -> None:
        """Put the learning rates back and scale the step the optimizer just took on each
        parameter whose factor the learning rate did not carry."""
        self._restore_lrs()
        remembered, self._before_step = self._before_step, None
        with torch.no_grad():  # before + ratio x (after - before), one fused call a group
            for params, before, ratio in remembered or ():
                torch._foreach_lerp_(params, before, 1.0 - ratio)

    def _lag(self) -> int:
        """Steps the average may travel before it is applied (see the class docstring)."""
        link = self._link_seconds()
        if link is None:
            return 1
        idle_s = link.step - link.critical / (self.critical_period if self.state.overlap else 1)
        if idle_s <= 0:
            return self.period
        return int(min(self.period, max(1, math.ceil(LAG_MARGIN * link.noncritical / idle_s))))

    def _launch_sync(self, step: int, *, lag: int) -> None:
        """Start averaging non-critical params (+ their movement scores) on the background lane.

        Applied at step ``step + lag`` by ``_apply_pending`` (see the class docstring).
        """
        names = list(self.noncritical)
        params = self.noncritical_params()
        if not params:
            return
        # The last synced values are the same on every rank, so the average of the replicas is
        # base + the average of (snapshot - base): the delta goes, in the wire format, with
        # error feedback (what a rounding left out goes with the next average).
        base = flat([self.synced[n] for n in names])
        delta = flat(params).sub_(base)  # this replica's movement since the last sync
        sizes = [self.synced[n].numel() for n in names]
        # Scores: every non-critical parameter's movement since its last sync (relative, as
        # relative_distance: 0 where the synced copy is 0), and every promoted one's (critical,
        # so synced every step, but its movement since the last global sync is what keeps it
        # promoted). Averaged across ranks with the parameters: decisions must come from
        # agreed figures, as replicas need not be bit-identical.
        moved_by = torch.stack(torch._foreach_norm(torch.split(delta, sizes)))
        reference = torch.stack(torch._foreach_norm(torch.split(base, sizes)))
        moved_total = float(torch.linalg.vector_norm(moved_by))
        moved = torch.where(reference > 0, moved_by / reference.clamp_min(1e-30), 0.0)
        scored = names + sorted(self.critical_names - self.base_critical)
        promoted_moved = [
            relative_distance(self.by_name[n].detach().reshape(-1), self.synced[n])
            for n in scored[len(names) :]
        ]
        moved = torch.cat([moved, torch.tensor(promoted_moved, dtype=moved.dtype)])
        self._keep_residuals(list(zip(names, sizes, strict=True)))
        wire = self.delta_feedback.compress(DELTA_KEY, delta, scale=1.0 / self.world_size)
        for name in scored[len(names) :]:  # promoted: measure from now on
            self.synced[name] = self.by_name[name].detach().reshape(-1).clone()
        scores = moved.to(torch.float32).div_(self.world_size).to(wire.device, wire.dtype)
        outgoing = torch.cat([wire, scores])
        fut = self.background.submit(
            outgoing, flush=True, chunk_bytes=lane_chunk_bytes(self._rate, self.world_size)
        )
        self._pending = _PendingAverage(
            fut, delta, base, names, scored, apply_at=step + lag, moved=moved_total
        )
        self.last_sync_step = step

    def _launch_critical(self, step: int, outgoing: TableRow) -> None:
        """Start averaging the critical parameters on the foreground engine (idle in
        backward with ``overlap_critical``; the lane yields to it), applied by
        ``_apply_critical`` (``CRITICAL_LAG`` steps later, one by default): as
        ``_launch_sync`` with a lag. The agreed table of this step rides along (one
        meeting of the ranks instead of two: the table is agreed at these steps only,
        ``agrees_at``)."""
        self._apply_critical()  # the last one's average is this one's base (done by now)
        names = [n for n, _ in self.named if n in self.critical_names]
        if not names:
            return
        base = flat([self.synced[n] for n in names])
        delta = flat([self.by_name[n] for n in names]).sub_(base)
        wire = self.delta_feedback.compress(CRITICAL_KEY, delta, scale=1.0 / self.world_size)
        if TABLE_RIDES:
            fut = outgoing.ride(wire, lambda carried: self.engine.submit(carried, flush=True))
        else:
            fut = self.engine.submit(wire, flush=True)
        # Applied before the next one starts at the latest: its base is this one's average.
        lag = max(1, min(CRITICAL_LAG, self.critical_period))
        self._critical_average = _CriticalAverage(fut, delta, base, names, apply_at=step + lag)

    def _apply_critical(self) -> None:
        """Move each critical parameter by (mean delta - own delta) of the average in
        flight, keeping the local step made since; the mean is the new synced copy."""
        pending, self._critical_average = self._critical_average, None
        if pending is None:
            return
        mean_delta = pending.future.wait()[: pending.delta.numel()]  # the table may follow
        average = pending.base.add_(mean_delta)
        apart_by = pending.delta.sub_(mean_delta)
        self._rebase(pending.names, apart_by, average)

    def _rebase(self, names: list[str], apart_by: torch.Tensor, average: torch.Tensor) -> None:
        """Move each named parameter by minus its part of ``apart_by`` (its snapshot's
        distance from the average: the progress made since is kept) and take its part of
        ``average`` as its synced copy (views of one tensor, never written to)."""
        params: list[torch.Tensor] = [self.by_name[n] for n in names]
        sizes = [q.numel() for q in params]
        with torch.no_grad():
            steps = [
                d.view_as(q) for d, q in zip(torch.split(apart_by, sizes), params, strict=True)
            ]
            torch._foreach_sub_(params, steps)
        for name, synced in zip(names, torch.split(average, sizes), strict=True):
            self.synced[name] = synced

    def _keep_residuals(self, layout: list[tuple[str, int]]) -> None:
        """Lay the deltas' residual out as ``layout`` (the non-critical set's names and sizes,
        in model order), keeping each parameter's part from the previous layout."""
        old = self.delta_feedback.residuals.get(DELTA_KEY)
        if layout != self._delta_layout:
            if old is not None:
                self.delta_feedback.residuals[DELTA_KEY] = relaid(old, self._delta_layout, layout)
            if self.outer is not None:
                self.outer = relaid(self.outer, self._delta_layout, layout)
        self._delta_layout = layout

    def _apply_pending(self) -> None:
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        fut, delta, names = pending.future, pending.delta, pending.names
        reduced = fut.wait()  # in the wire format: the in-place ops below compute in fp32
        n = delta.numel()
        mean_delta = reduced[:n]
        average = pending.base.add_(mean_delta)
        # This replica's delta minus the mean one: how far its snapshot was from the average
        # (snapshot - average), subtracted below so the progress made since is kept.
        apart_by = delta.sub_(mean_delta)
        if pending.moved > 0:
            # How far this replica was from the replicas' mean, against how far it had moved:
            # the share of its movement that was disagreement (see local_drift). At most 1: a
            # replica that stayed while another moved away is far from the mean too, but the
            # one that moved reports that drift.
            apart = float(torch.linalg.vector_norm(apart_by))
            self.apart_share = min(1.0, apart / pending.moved)
        beta = self.config.outer_momentum
        if beta:
            # SlowMo: the synced copy moves by the mean delta plus beta times the previous
            # averages' steps; each replica's params move by the same extra.
            if self.outer is None:
                self.outer = torch.zeros(n, dtype=average.dtype, device=average.device)
            extra = self.outer.mul_(beta)
            average.add_(extra)
            apart_by.sub_(extra)
            extra.add_(mean_delta)  # the momentum is now this average's whole step
        self._rebase(names, apart_by, average)
        for name, score in zip(pending.scored, reduced[n:].tolist(), strict=True):
            self.scores[name] = score
        self._reclassify()
        self._set_noncritical()

    def _reclassify(self) -> None:
        """Promote the highest movement-per-byte parameters within the promotion budget.

        A parameter is promoted when its score exceeds the promotion threshold and stays
        promoted while it exceeds ``DEMOTION_SHARE`` of it (promotion costs an average of
        its optimizer state, so it should not flap). Without the optimizer (``wrap`` was not
        given it) that average is impossible, and a promoted parameter's replicas would
        drift apart from their per-rank moments: nothing is promoted then.
        """
        if self.optimizer is None:
            return
        sizes = {n: q.numel() * q.element_size() for n, q in self.named}
        budget = self.config.promotion_budget * self.total_bytes
        candidates = sorted(
            (n for n in self.scores if n not in self.base_critical),
            key=lambda n: self.scores[n] / sizes[n],
            reverse=True,
        )
        promoted: set[str] = set()
        threshold = PROMOTION_THRESHOLD * self.config.drift_threshold
        for name in candidates:
            keep = DEMOTION_SHARE * threshold if name in self.critical_names else threshold
            if self.scores[name] > keep and sizes[name] <= budget:
                promoted.add(name)
                budget -= sizes[name]
        new_critical = self.base_critical | promoted
        newly = new_critical - self.critical_names
        if newly:
            self._average_optimizer_state(newly)  # their residuals go (_keep_residuals)
        for name in self.critical_names - new_critical:
            self.synced[name] = self.by_name[name].detach().reshape(-1).clone()
        self.critical_names = new_critical
        self.state.set_critical(self._ids(new_critical))

    def _average_optimizer_state(self, names: set[str]) -> None:
        """Make newly critical params and their optimizer moments identical on all ranks.

        With overlapped averaging the parameters carry one step of local progress, and
        their moments are per-rank; a critical parameter must be the same everywhere.
        """
        params = [q for n, q in self.named if n in names]
        moments = [
            v
            for q in params
            for v in (
                self.optimizer.state.get(q, {}).values() if self.optimizer is not None else ()
            )
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0
        ]
        average(self.engine, [*params, *moments])

    def _adapt_period(self) -> None:
        h0 = self.config.sync_period
        ada = h0
        if self.loss0 and self.loss_ema is not None and self.loss0 > 0:
            ada = math.ceil(h0 * math.sqrt(max(self.loss_ema, 0.0) / self.loss0))
        link = self._link_seconds()
        bound = 1
        if link is not None:
            bound = math.ceil(link.noncritical / (AVERAGING_BUDGET * link.step))
        self.period = int(min(self.config.max_sync_period, max(1, ada, bound)))

    def _figures(self) -> dict[str, float]:
        everything = self.state.sync_all
        critical = self.total_numel - (0 if everything else self._noncritical_numel)
        return {
            "sync_period": float(1 if self.drift.enhancing or everything else self.period),
            "drift": self.drift.last_drift,
            "grad_norm_var": self.drift.grad_norm_var,
            "loss_descent_rate": self.drift.loss_rate,
            "critical_fraction": critical / max(1, self.total_numel),
            "sync_enhanced": float(self.drift.enhancing),
            "fast_link": float(self.fast_link),
        }


class _LinkSeconds(NamedTuple):
    """Seconds on the agreed link: a step; all / non-critical / critical parameter bytes in
    the formats they go in; one byte of an all-reduce."""

    step: float
    full_sync: float
    noncritical: float
    critical: float
    per_byte: float


class _CriticalAverage(NamedTuple):
    future: torch.futures.Future[torch.Tensor]
    delta: torch.Tensor  # params - base, this replica's (fp32, this object's own)
    base: torch.Tensor  # the critical parameters' last average (the same on every rank)
    names: list[str]
    apply_at: int  # the step in whose prepare() it is applied


class _PendingAverage(NamedTuple):
    future: torch.futures.Future[torch.Tensor]
    delta: torch.Tensor  # snapshot - base: this replica's movement (fp32, this object's own)
    base: torch.Tensor  # the last synced values (the same on every rank; this object's own)
    names: list[str]  # averaged parameters, in snapshot order
    scored: list[str]  # parameters whose movement follows the snapshot
    apply_at: int
    moved: float  # ||snapshot - base||: how far this replica moved since the last average


# Optimizers that divide by a running second moment of the gradient (or its sum/max).
_SECOND_MOMENT_OPTIMIZERS: tuple[type[torch.optim.Optimizer], ...] = (
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.RMSprop,
    torch.optim.Adagrad,
    torch.optim.Adadelta,
)
# Optimizers whose step is linear in the learning rate (weight decay included) and whose
# state does not depend on it: a step taken with lr x f is the step with lr scaled by f.
_LR_LINEAR: frozenset[type[torch.optim.Optimizer]] = frozenset(
    {torch.optim.SGD, *_SECOND_MOMENT_OPTIMIZERS}
)
# Default local step scale under those optimizers: world size to this power (see Adaptive).
LOCAL_STEP_EXPONENT = 0.8
# With ``overlap_critical`` the critical parameters take local steps too, averaged after
# the step: world size to this power (see Adaptive).
CRITICAL_STEP_EXPONENT = 0.5
# With ``overlap_critical``: steps between the critical parameters' averages, unless
# ``critical_period`` is set (see Adaptive). 2 (1 before). Every third step was not kept:
# in a record-sized run paired with every second step it reached full's loss sooner on
# shapes_cnn (2.19x against 2.07x at 2 ranks) but later on topics_encoder (2.21x against
# 2.39x), and at 4 ranks ended topics_encoder 8% over full's loss at the budget (every
# second step: 1% under); docs/benchmarks.md.
CRITICAL_PERIOD = 2
# Whether DDP broadcasts rank 0's buffers (BatchNorm's running statistics) at every forward,
# as it does by default. Not under adaptive: its replicas are not identical between averages
# anyway, and the broadcast made every forward a meeting of the ranks, so each step waited
# for the slowest rank there (zoo:bn_mlp: forward 5.0 ms against 1.6-2.4 without it, in
# trace_sync at 840 Mbit/s). ``synchronize`` averages the floating-point buffers with the
# parameters; ``wrap(..., broadcast_buffers=True)`` still asks for DDP's behaviour.
BROADCAST_BUFFERS = False
# Whether the ranks agree a table (drift, loss, step time, link figures) after every step.
# Not during selective sync with critical parameters averaged after the step: a table then
# goes with each critical average (every CRITICAL_PERIOD steps), where the ranks meet
# anyway, and covers the steps since the last one. The steps between skip the drift
# measurement, the table's all-reduce and the decisions: on zoo:bn_mlp (trace_sync, 900
# Mbit/s) 0.4, 0.3 and 0.4 ms of the session's 2.8 ms a step (median). Paired in the seed
# regime (arm adaptive-agree1): at 2 ranks 4-9% more samples a second on five models in
# a side run, mixed in the record after it; at 4 ranks to target sooner on four of five.
AGREE_EVERY_STEP = False
# Steps a critical average travels before it is applied (at most CRITICAL_PERIOD: it is
# applied before the next one starts). 1: after the next step, whatever the period. Two
# (arm adaptive-critlag2) shortened shapes_cnn's steps in trace_sync but was mixed to target
# in the seed regime (2 ranks: sooner on two models of five, within 2% samples a second but
# on zoo:bn_mlp), the waits it removes being CPU the other rank used; docs/benchmarks.md.
CRITICAL_LAG = 1
# Whether that table rides the critical average (``TableRow.ride``) rather than going alone
# as a second collective at the same step: each collective costs a meeting of the ranks and
# the transport's per-message work (one gloo all-reduce of up to 64 KB: about 1 ms and 0.64
# ms of CPU a rank on the 2-core benchmark machine, bench_meeting). Arm adaptive-table-alone:
# riding reached full's loss sooner on all ten model and rank-count pairs of the record.
TABLE_RIDES = True


def lane_chunk_bytes(rate_Bps: float | None, world_size: int) -> int | None:
    """The background lane's chunk size on a link of ``rate_Bps`` (agreed): the payload of
    ``BACKGROUND_CHUNK_S`` of ring all-reduce wire time, at least the lane's default and at
    most the engine's largest chunk. None with no known rate (the lane's default then).
    Agreed figures only: every rank cuts the same chunks."""
    return _link_payload(BACKGROUND_CHUNK_S, rate_Bps, world_size, BACKGROUND_CHUNK_BYTES)


def critical_fuse_bytes(rate_Bps: float | None, world_size: int) -> int:
    """Bytes of critical slices fused into one collective on a link of ``rate_Bps``
    (agreed): ``CRITICAL_FUSE_S`` of ring all-reduce wire time, at least ``FUSE_BYTES``
    (also with no known rate)."""
    return _link_payload(CRITICAL_FUSE_S, rate_Bps, world_size, FUSE_BYTES) or FUSE_BYTES


def _link_payload(
    seconds: float, rate_Bps: float | None, world_size: int, floor: int
) -> int | None:
    """The payload whose ring all-reduce wire bytes take ``seconds`` at ``rate_Bps``, between
    ``floor`` and the engine's largest chunk; None with no known rate or a single rank."""
    wire_share = _ring_share(world_size)
    if not rate_Bps or not wire_share:
        return None
    return int(min(MAX_CHUNK_BYTES, max(floor, seconds * rate_Bps / wire_share)))


def _ring_share(world_size: int) -> float:
    """Wire bytes a rank sends per payload byte in a ring all-reduce: 2(n-1)/n."""
    return ring_allreduce_wire_bytes(2**20, world_size) / 2**20


def relaid(
    residual: torch.Tensor, old: list[tuple[str, int]], new: list[tuple[str, int]]
) -> torch.Tensor:
    """``residual``, laid out as ``old`` (names and sizes end to end), laid out as ``new``:
    each name keeps its part, a name new to the layout starts at zero, a name gone is
    dropped. The non-critical set changes only when parameters are promoted (their values
    were just averaged along with their optimizer state, so their residual goes) or demoted."""
    parts = dict(zip((n for n, _ in old), torch.split(residual, [k for _, k in old]), strict=True))
    return torch.cat([parts.get(n, residual.new_zeros(k)) for n, k in new])


def _norm_of(norms: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> float:
    """The norm of tensors end to end, from their norms (``torch._foreach_norm``)."""
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def local_step_scale(
    config: RuntimeConfig,
    optimizer: torch.optim.Optimizer | None,
    world_size: int,
    *,
    exponent: float | None = None,
) -> float:
    """The factor on local steps: the configured one, else n^exponent (non-critical
    parameters: ``LOCAL_STEP_EXPONENT``) under second-moment optimizers, 1 otherwise."""
    if config.local_step_scale is not None:
        return config.local_step_scale
    if isinstance(optimizer, _SECOND_MOMENT_OPTIMIZERS):
        return math.pow(world_size, LOCAL_STEP_EXPONENT if exponent is None else exponent)
    return 1.0
