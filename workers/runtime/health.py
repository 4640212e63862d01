"""Link health: per-step link figures, adaptive chunk size (AIMD), ``link_degraded`` alarms.

Inputs are the figures every rank shared in the session's agreed table, so all ranks take
identical decisions (chunk size must match across ranks or collectives would mismatch). A
"step" below is an agreed table, covering the steps since the last: under adaptive's
selective sync one per critical average (every second step by default), else one per
20 ms of step time (``strategies.base.table_period``: every step for steps of 20 ms or
more) and one per optimizer step while ``link_degraded`` is raised, so that from the
first degraded table on the ladder below runs step by step. The ladder on a slow link:

1. a step whose worst sync delay (time a rank sat inside a collective, mostly waiting for a
   late peer) or that delay's jitter exceeds ``jitter_threshold_s`` is *degraded*: halve the
   chunk size (multiplicative decrease), raise ``link_degraded`` once, and re-issue late
   chunks from the next step on (below);
2. healthy steps grow the chunk again (additive increase); ``clear_after`` healthy steps in a
   row (no slow transfer, none re-issued) clear the alarm and stop re-issuing;
3. a rank the others keep waiting for (spread of the ranks' sync delays above the threshold)
   is named in a ``straggler`` alarm, cleared when the spread falls under half the threshold;
4. ``escalate_after`` degraded steps in a row raise ``LinkFailure`` on every rank at the same
   step, after the optimizer step, so the run can checkpoint and exit cleanly
   (``EXIT_LINK_FAILED``) and the supervisor restart it.

While the alarm is raised, a gradient chunk whose first attempt is late (``reissue_after_s``)
is re-issued once on a spare group (``reissue.py``: every rank agrees first, as gloo cannot
cancel a collective). A step whose only slow transfers went through on re-issue does not
count towards escalation, but does not clear the alarm either: the link is still bad, the
re-issue is what hides it. A slow link *probe* is re-issued once too (``probes.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from workers.runtime import protocol as p
from workers.runtime.engine import CommEngine
from workers.runtime.reporter import Reporter

CHUNK_STEP_BYTES = 128 * 1024
JITTER_GAIN = 1 / 16  # RFC 3550's gain for interarrival jitter


class LinkFailure(RuntimeError):
    """The link stayed degraded past escalation; checkpoint and exit with EXIT_LINK_FAILED."""

    exit_code = p.EXIT_LINK_FAILED


class LinkHealth:
    """Decides chunk size and link alarms from agreed per-step link figures."""

    __slots__ = (
        "engine",
        "threshold_s",
        "reporter",
        "escalate_after",
        "clear_after",
        "max_chunk_bytes",
        "degraded_steps",
        "healthy_steps",
        "alarmed",
        "straggler_alarmed",
        "jitter_s",
        "sync_delay_s",
        "reissue_after_s",
        "reissued",
        "_last_delay",
    )

    def __init__(
        self,
        *,
        engine: CommEngine,
        threshold_s: float,
        reporter: Reporter | None,
        escalate_after: int = 8,
        clear_after: int = 3,
        reissue_after_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.threshold_s = threshold_s
        self.reporter = reporter
        self.escalate_after = escalate_after
        self.clear_after = clear_after
        self.max_chunk_bytes = engine.chunk_bytes
        self.degraded_steps = 0
        self.healthy_steps = 0
        self.alarmed = False
        self.straggler_alarmed = False
        self.jitter_s = 0.0
        self.sync_delay_s = 0.0
        # None: never re-issue (no spare group, or a strategy whose hooks bypass the engine).
        self.reissue_after_s = reissue_after_s if engine.reissuer is not None else None
        self.reissued = 0  # chunks re-issued since the alarm was raised
        self._last_delay: float | None = None

    def update(self, *, step: int, sync_delays: Sequence[float], reissued: int = 0) -> None:
        """Take one step's agreed per-rank sync delays; may raise ``LinkFailure``.

        ``reissued``: chunks re-issued in the step (the same count on every rank: each
        re-issue was agreed). A re-issued chunk's sync delay is its retry's.
        Jitter follows the worst sync delay (not comm time, which legitimately swings when a
        periodic global average runs) with RFC 3550's interarrival-jitter estimator: the
        mean absolute change between steps, smoothed with gain ``JITTER_GAIN``. A one-off
        spike moves it by about 1/8 of its size; sustained swings move it to their size.
        (A standard deviation over the last 8 steps, used before, kept one spike 3x the
        threshold above it for 8 steps: long enough to escalate.)
        """
        worst = max(range(len(sync_delays)), key=lambda r: sync_delays[r]) if sync_delays else 0
        self.sync_delay_s = sync_delays[worst] if sync_delays else 0.0
        if self._last_delay is not None:
            change = abs(self.sync_delay_s - self._last_delay)
            self.jitter_s += (change - self.jitter_s) * JITTER_GAIN
        self._last_delay = self.sync_delay_s
        self._check_straggler(step, sync_delays)
        value = max(self.sync_delay_s, self.jitter_s)
        self.reissued += reissued
        try:
            if value > self.threshold_s:
                self._degraded(step, value, worst)
            elif reissued:  # went through on re-issue: not escalating, not healthy either
                self.degraded_steps = 0
                self.healthy_steps = 0
            else:
                self._healthy(step, value)
        finally:
            self.engine.reissue_after_s = self.reissue_after_s if self.alarmed else None

    def _degraded(self, step: int, value: float, worst: int) -> None:
        self.degraded_steps += 1
        self.healthy_steps = 0
        self.engine.set_chunk_bytes(self.engine.chunk_bytes // 2)
        if not self.alarmed:
            self.alarmed = True
            self.reissued = 0
            reissue = (
                f"; chunks late by {self.reissue_after_s:.3f}s are re-issued"
                if self.reissue_after_s is not None
                else ""
            )
            self._alarm(
                step,
                value,
                "raised",
                f"rank {worst} waited {self.sync_delay_s:.3f}s in a collective (jitter {self.jitter_s:.3f}s); "
                f"chunks shrunk to {self.engine.chunk_bytes} B{reissue}",
            )
        if self.degraded_steps >= self.escalate_after:
            raise LinkFailure(
                f"link degraded for {self.degraded_steps} steps (worst {value:.3f}s > {self.threshold_s}s)"
            )

    def _healthy(self, step: int, value: float) -> None:
        self.degraded_steps = 0
        self.healthy_steps += 1
        if self.engine.chunk_bytes < self.max_chunk_bytes:
            self.engine.set_chunk_bytes(
                min(self.max_chunk_bytes, self.engine.chunk_bytes + CHUNK_STEP_BYTES)
            )
        if self.alarmed and self.healthy_steps >= self.clear_after:
            self.alarmed = False
            self._alarm(
                step, value, "cleared", f"link healthy again ({self.reissued} chunks re-issued)"
            )

    def _check_straggler(self, step: int, sync_delays: Sequence[float]) -> None:
        """The rank that waits least inside collectives is the one the others wait for."""
        if len(sync_delays) < 2:
            return
        spread = max(sync_delays) - min(sync_delays)
        late = min(range(len(sync_delays)), key=lambda r: sync_delays[r])
        if not self.straggler_alarmed and spread > self.threshold_s:
            self.straggler_alarmed = True
            detail = f"rank {late} arrives last; other ranks wait up to {spread:.3f}s for it"
            self._alarm(step, spread, "raised", detail, kind=p.ALARM_STRAGGLER)
        elif self.straggler_alarmed and spread < self.threshold_s * 0.5:
            self.straggler_alarmed = False
            self._alarm(
                step, spread, "cleared", "ranks arrive together again", kind=p.ALARM_STRAGGLER
            )

    def _alarm(
        self, step: int, value: float, state: str, detail: str, *, kind: str = p.ALARM_LINK_DEGRADED
    ) -> None:
        if self.reporter is not None and self.reporter.is_metrics_rank:
            self.reporter.alarm(
                kind,
                value=value,
                threshold=self.threshold_s,
                step=step,
                state=state,
                detail=detail,
            )
