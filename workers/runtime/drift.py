"""Drift monitor: how far replicas wander between global syncs, and the alarm about it.

Drift (see the glossary in docs/architecture.md) is a replica's distance from the other
replicas, relative to the last globally synced weights: adaptive estimates it as
``a * ||w - w_sync|| / ||w_sync||``, the distance moved since that sync times ``a``, the share of
its movement the last average found apart from the replicas' mean (``Adaptive.local_drift``).
Each rank measures its own; the session shares all ranks' values in its one small
all-reduce of figures (the agreed table, after every step or, under adaptive's selective
sync, with each critical average), so every rank takes the same decision here:

* drift (the worst rank's) above ``threshold``: raise a ``sync_drift`` alarm and turn on
  *sync enhancement* (global sync every step) until it recovers;
* drift back below ``threshold * recover_ratio`` while enhancing: clear the alarm and
  return to the adaptive period.

It also keeps two health figures: the variance of gradient norms across ranks and the
loss-descent rate (slope of an exponential moving average of the loss, per step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from workers.runtime import protocol as p
from workers.runtime.reporter import Reporter


def relative_distance(current: torch.Tensor, reference: torch.Tensor) -> float:
    """Return ``||current - reference|| / ||reference||`` (0 when the reference is zero)."""
    ref = float(reference.norm())
    if ref == 0.0:
        return 0.0
    return float((current - reference).norm()) / ref


class DriftMonitor:
    """Turns agreed per-rank drift values into alarms and the sync-enhancement flag."""

    __slots__ = (
        "threshold",
        "recover_ratio",
        "reporter",
        "enhancing",
        "raised_at",
        "last_drift",
        "grad_norm_var",
        "loss_rate",
        "_loss_ema",
        "alarms_raised",
        "alarms_cleared",
    )

    def __init__(
        self, *, threshold: float, reporter: Reporter | None, recover_ratio: float = 0.5
    ) -> None:
        self.threshold = threshold
        self.recover_ratio = recover_ratio
        self.reporter = reporter
        self.enhancing = False
        self.raised_at: int | None = None
        self.last_drift = 0.0
        self.grad_norm_var = 0.0
        self.loss_rate = 0.0
        self._loss_ema: float | None = None
        self.alarms_raised = 0
        self.alarms_cleared = 0

    def update(
        self,
        *,
        step: int,
        drifts: Sequence[float],
        grad_norms: Sequence[float] = (),
        losses: Sequence[float] = (),
        covered: bool = False,
    ) -> bool:
        """Take one step's agreed figures; return True while sync enhancement is on.

        ``covered``: an average already started from the parameters these drifts were
        measured on (the figures arrive a step late). It repairs that drift, so the figures
        neither raise nor clear an alarm, and call for no sync of their own (False).
        """
        worst = max(range(len(drifts)), key=lambda r: drifts[r]) if drifts else 0
        value = drifts[worst] if drifts else 0.0
        self.last_drift = value
        self._track_health(grad_norms, losses)
        if covered:
            return False
        if not self.enhancing and value > self.threshold:
            self.enhancing, self.raised_at = True, step
            self.alarms_raised += 1
            self._alarm(
                step, value, "raised", f"rank {worst} drifted {value:.4f}; forcing global sync"
            )
        elif self.enhancing and value < self.threshold * self.recover_ratio:
            self.enhancing = False
            self.alarms_cleared += 1
            self._alarm(
                step,
                value,
                "cleared",
                f"drift recovered after {step - (self.raised_at or step)} steps",
            )
        return self.enhancing

    def _track_health(self, grad_norms: Sequence[float], losses: Sequence[float]) -> None:
        if grad_norms:
            mean = sum(grad_norms) / len(grad_norms)
            self.grad_norm_var = sum((g - mean) ** 2 for g in grad_norms) / len(grad_norms)
        finite = [v for v in losses if math.isfinite(v)]
        if finite:
            loss = sum(finite) / len(finite)
            if self._loss_ema is None:
                self._loss_ema = loss
            else:
                previous = self._loss_ema
                self._loss_ema = 0.9 * previous + 0.1 * loss
                self.loss_rate = self._loss_ema - previous

    def _alarm(self, step: int, value: float, state: str, detail: str) -> None:
        # Every rank reaches the same decision; one report is enough (the metrics rank's).
        if self.reporter is not None and self.reporter.is_metrics_rank:
            self.reporter.alarm(
                p.ALARM_SYNC_DRIFT,
                value=value,
                threshold=self.threshold,
                step=step,
                state=state,
                detail=detail,
            )
