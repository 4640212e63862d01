"""Runtime configuration: one frozen dataclass, read from the environment the supervisor sets.

    cfg = RuntimeConfig.from_env()          # reads SYNCLANE_* and torchrun's RANK/WORLD_SIZE
    cfg = RuntimeConfig(sync="adaptive")    # or build one in code (tests, user scripts)

Invalid values fail loudly at start-up rather than surfacing as a strange hang in the middle
of a collective: a ``ValueError`` that names what the user set, the environment variable
(``SYNCLANE_LINK_MBPS must be > 0``) for a value read from the environment, else the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from workers.runtime import protocol as p

# adaptive's wire formats (workers.runtime.compress.WIRE_DTYPES, which a test keeps equal;
# not imported here: this module stays importable without torch).
COMPRESS_CHOICES = ("none", "bf16", "fp16", "int8", "auto")


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """How this rank synchronises, reports and fails.

    ``job_id``/``redis_url`` None mean "no control plane": reporting becomes a no-op.
    ``link_mbps`` None means no emulated link (the throttle only obeys the allocation).
    """

    # Identity and wiring.
    job_id: str | None = None
    redis_url: str | None = None
    run_dir: str | None = None
    rank: int = 0
    world_size: int = 1
    metrics_rank: int = 0

    # Synchronisation.
    sync: str = p.SYNC_FULL
    critical: str | None = (
        None  # regex of parameter names synced every step (adaptive); None: attention
    )
    # adaptive, when no parameter name matches ``critical``: the parameters that moved most
    # during warm-up become critical, up to this share of the parameter bytes (a sixth: a
    # third sent more and reached the target later on the zoo's LSTM, docs/benchmarks.md).
    critical_share: float = 1 / 6
    sync_period: int = 8  # initial H: global sync of non-critical params every H steps
    max_sync_period: int = 32  # upper bound of H (the allocation bound stops here)
    # DDP bucket size (fusion of small tensors into buckets); None: 1 MB under adaptive, DDP's
    # own default (25 MB, a 1 MB first bucket) under the others (``strategies.bucket_cap_mb``).
    bucket_cap_mb: float | None = None
    chunk_kb: int = 1024  # initial/maximum engine chunk; AIMD shrinks it on a degraded link
    warmup_steps: int = 10  # steps of full sync before adaptive/powersgd/localsgd start
    powersgd_rank: int = 2  # PowerSGD matrix approximation rank
    # adaptive: factor on non-critical params' local optimizer steps; None = automatic
    # (world size^0.8 for second-moment optimizers, 1 otherwise; see strategies.Adaptive).
    local_step_scale: float | None = None
    # adaptive: wire format of what goes every step and of the periodic averages' deltas,
    # with error feedback (workers.runtime.compress): "bf16", "fp16", "none" (fp32), "int8"
    # (critical gradients in blockwise int8, the rest in bf16), "auto" (default: bf16, and
    # critical gradients in int8 where that saves enough link time; strategies.Adaptive).
    compress: str = "auto"
    # adaptive: average the critical parameters (not their gradients) after the step (every
    # critical_period steps), overlapped with the next step and applied after it (as the
    # non-critical ones every H steps), so no rank waits for the link in backward; replicas
    # differ by their last local steps. Off: critical gradients averaged in backward
    # (replicas identical).
    overlap_critical: bool = True
    # adaptive, with overlap_critical: steps between the critical parameters' averages
    # (each still overlapped with the next step); None: CRITICAL_PERIOD (2) in
    # strategies.Adaptive.
    critical_period: int | None = None
    # adaptive, with overlap_critical off: apply each step's critical gradient average at the
    # next step, so it crosses the link while that step computes (one step stale).
    late_critical: bool = False
    # adaptive: momentum on the periodic averages of the non-critical parameters (SlowMo: the
    # averaged movement plus this share of the previous averages' steps); 0: plain averaging.
    outer_momentum: float = 0.0
    # adaptive (with overlap_critical off): share of the parameter bytes that non-critical
    # parameters moving fast may be promoted into (synced every step); 0: none. Off by default: no measurement showed it
    # paying (docs/benchmarks.md), and 0.1 sent 5.6% of tiny_gpt's parameters more a step.
    promotion_budget: float = 0.0
    # adaptive decides on a fixed schedule (no timing input): reproducible for a fixed seed.
    deterministic: bool = False

    # Drift monitor.
    # Relative L2 distance of a replica's non-critical parameters from the others' (the drift
    # glossary entry in docs/architecture.md).
    drift_threshold: float = p.DEFAULT_DRIFT_THRESHOLD

    # Link emulation, throttle and health.
    link_mbps: float | None = None
    jitter_threshold_s: float = 0.25
    # On a degraded link, a gradient chunk this late is re-issued once (workers.runtime.reissue);
    # None: jitter_threshold_s; 0: never.
    reissue_after_s: float | None = None
    probe_every: int = 50  # steps between link probes; 0 disables probes
    # The agreed table's cadence where no decision needs it (strategies.base.table_period):
    # a table after the first step that ends this much agreed step time after the last;
    # 0: after every step (the rule before; also under deterministic).
    table_interval_s: float = 0.02
    fault: str | None = None  # fault-injector spec (workers.runtime.faults)

    def __post_init__(self) -> None:
        if self.job_id is not None and not self.job_id.strip():
            raise ValueError(f"{_label('job_id')} must be non-empty when set")
        if self.redis_url is not None and not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ValueError(
                f"{_label('redis_url')} must be a redis://, rediss:// or unix:// URL, got {self.redis_url!r}"
            )
        if self.world_size < 1:
            raise ValueError(f"{_label('world_size')} must be >= 1, got {self.world_size}")
        for name in ("rank", "metrics_rank"):
            value = getattr(self, name)
            if not 0 <= value < self.world_size:
                raise ValueError(f"{_label(name)} must be in [0, {self.world_size}), got {value}")
        if self.sync not in (*p.SYNC_STRATEGIES, p.SYNC_NONE):
            raise ValueError(
                f"{_label('sync')} must be one of "
                f"{', '.join((*p.SYNC_STRATEGIES, p.SYNC_NONE))}, got {self.sync!r}"
            )
        if not 1 <= self.sync_period <= self.max_sync_period:
            raise ValueError(
                f"need 1 <= {_label('sync_period')} <= {_label('max_sync_period')}, "
                f"got {self.sync_period}, {self.max_sync_period}"
            )
        if not 0 <= self.outer_momentum < 1:
            raise ValueError(
                f"{_label('outer_momentum')} must be in [0, 1), got {self.outer_momentum}"
            )
        if not 0 <= self.promotion_budget < 1:
            raise ValueError(
                f"{_label('promotion_budget')} must be in [0, 1), got {self.promotion_budget}"
            )
        if not 0 < self.critical_share <= 1:
            raise ValueError(
                f"{_label('critical_share')} must be in (0, 1], got {self.critical_share}"
            )
        if self.bucket_cap_mb is not None:
            _require_positive("bucket_cap_mb", self.bucket_cap_mb)
        if self.chunk_kb < 64:
            raise ValueError(f"{_label('chunk_kb')} must be >= 64, got {self.chunk_kb}")
        if self.warmup_steps < 0 or self.powersgd_rank < 1:
            raise ValueError(
                f"{_label('warmup_steps')} must be >= 0 and {_label('powersgd_rank')} >= 1"
            )
        _require_positive("drift_threshold", self.drift_threshold)
        _require_positive("jitter_threshold_s", self.jitter_threshold_s)
        if self.link_mbps is not None:
            _require_positive("link_mbps", self.link_mbps)
        if self.reissue_after_s is not None and not self.reissue_after_s >= 0:
            raise ValueError(
                f"{_label('reissue_after_s')} must be >= 0, got {self.reissue_after_s}"
            )
        if self.local_step_scale is not None:
            _require_positive("local_step_scale", self.local_step_scale)
        if self.compress not in COMPRESS_CHOICES:
            raise ValueError(
                f"{_label('compress')} must be one of {', '.join(COMPRESS_CHOICES)}, "
                f"got {self.compress!r}"
            )
        if self.table_interval_s < 0:
            raise ValueError(
                f"{_label('table_interval_s')} must be >= 0, got {self.table_interval_s}"
            )
        if self.probe_every < 0:
            raise ValueError(f"{_label('probe_every')} must be >= 0, got {self.probe_every}")
        if self.promotion_budget and self.overlap_critical:
            raise ValueError(
                f"{_label('promotion_budget')} needs {_label('overlap_critical')} off: a "
                "parameter is promoted into the critical set whose gradients are averaged"
            )
        if self.critical_period is not None:
            if self.critical_period < 1:
                raise ValueError(
                    f"{_label('critical_period')} must be >= 1, got {self.critical_period}"
                )
            if not self.overlap_critical:
                raise ValueError(
                    f"{_label('critical_period')} needs {_label('overlap_critical')} on: "
                    "with it off critical gradients are averaged in every backward"
                )
        if self.late_critical and self.overlap_critical:
            raise ValueError(
                f"{_label('late_critical')} needs {_label('overlap_critical')} off: critical "
                "gradients go one step late only where they are averaged as gradients"
            )
        if self.critical is not None:
            try:
                re.compile(self.critical)
            except re.error as exc:
                raise ValueError(
                    f"{_label('critical')} must be a regular expression: {exc}"
                ) from None
        if self.fault is not None:
            from workers.runtime.faults import FaultSpec  # validate eagerly; stdlib only

            try:
                FaultSpec.parse(self.fault)
            except ValueError as exc:
                raise ValueError(f"{_label('fault')}: {exc}") from None

    @property
    def reporting(self) -> bool:
        """Return True when a control plane is wired (Redis URL and job id both set)."""
        return self.redis_url is not None and self.job_id is not None

    @property
    def reissue_wait_s(self) -> float | None:
        """Seconds a late chunk waits before its re-issue (None: never re-issued)."""
        if self.reissue_after_s == 0:
            return None
        return self.jitter_threshold_s if self.reissue_after_s is None else self.reissue_after_s

    def with_(self, **changes: Any) -> RuntimeConfig:
        """Return a copy with ``changes`` applied (and validated again)."""
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> RuntimeConfig:
        """Build a config from ``env`` (default ``os.environ``); ``overrides`` win over env."""
        e = os.environ if env is None else env
        values: dict[str, Any] = {
            "job_id": _str(e, p.ENV_JOB_ID),
            "redis_url": _str(e, p.ENV_REDIS_URL),
            "run_dir": _str(e, p.ENV_RUN_DIR),
            "rank": _int(e, "RANK", 0),
            "world_size": _int(e, "WORLD_SIZE", 1),
            "metrics_rank": _int(e, p.ENV_METRICS_RANK, 0),
            "sync": _str(e, p.ENV_SYNC) or p.SYNC_FULL,
            "sync_period": _int(e, p.ENV_SYNC_PERIOD, 8),
            "max_sync_period": _int(e, p.ENV_MAX_SYNC_PERIOD, 32),
            "drift_threshold": _float(e, p.ENV_DRIFT_THRESHOLD, p.DEFAULT_DRIFT_THRESHOLD),
            "link_mbps": _float_or_none(e, p.ENV_LINK_MBPS),
            "jitter_threshold_s": _float(e, p.ENV_JITTER_THRESHOLD_S, 0.25),
            "reissue_after_s": _float_or_none(e, p.ENV_REISSUE_AFTER_S),
            "probe_every": _int(e, p.ENV_PROBE_EVERY, 50),
            "table_interval_s": _float(e, p.ENV_TABLE_INTERVAL_S, 0.02),
            "fault": _str(e, p.ENV_FAULT),
            "critical": _str(e, p.ENV_CRITICAL),
            "critical_share": _float(e, p.ENV_CRITICAL_SHARE, 1 / 6),
            "local_step_scale": _float_or_none(e, p.ENV_LOCAL_STEP_SCALE),
            "bucket_cap_mb": _float_or_none(e, p.ENV_BUCKET_CAP_MB),
            "compress": _str(e, p.ENV_COMPRESS) or "auto",
            "deterministic": _bool(e, p.ENV_DETERMINISTIC),
            "late_critical": _bool(e, p.ENV_LATE_CRITICAL),
            "overlap_critical": _bool(e, p.ENV_OVERLAP_CRITICAL, default=True),
            "critical_period": _int_or_none(e, p.ENV_CRITICAL_PERIOD),
            "outer_momentum": _float(e, p.ENV_OUTER_MOMENTUM, 0.0),
            "promotion_budget": _float(e, p.ENV_PROMOTION_BUDGET, 0.0),
        }
        values.update(overrides)
        # Errors name the variable to change (the user's value, or the default it left).
        with _labelled({f: env for f, env in FIELD_ENV.items() if f not in overrides}):
            return cls(**values)


def _require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{_label(name)} must be > 0, got {value}")


# Fields read from the environment and the variable each comes from (for error messages).
FIELD_ENV: Mapping[str, str] = {
    "job_id": p.ENV_JOB_ID,
    "redis_url": p.ENV_REDIS_URL,
    "run_dir": p.ENV_RUN_DIR,
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "metrics_rank": p.ENV_METRICS_RANK,
    "sync": p.ENV_SYNC,
    "sync_period": p.ENV_SYNC_PERIOD,
    "max_sync_period": p.ENV_MAX_SYNC_PERIOD,
    "drift_threshold": p.ENV_DRIFT_THRESHOLD,
    "link_mbps": p.ENV_LINK_MBPS,
    "jitter_threshold_s": p.ENV_JITTER_THRESHOLD_S,
    "reissue_after_s": p.ENV_REISSUE_AFTER_S,
    "probe_every": p.ENV_PROBE_EVERY,
    "table_interval_s": p.ENV_TABLE_INTERVAL_S,
    "fault": p.ENV_FAULT,
    "critical": p.ENV_CRITICAL,
    "critical_share": p.ENV_CRITICAL_SHARE,
    "local_step_scale": p.ENV_LOCAL_STEP_SCALE,
    "bucket_cap_mb": p.ENV_BUCKET_CAP_MB,
    "compress": p.ENV_COMPRESS,
    "deterministic": p.ENV_DETERMINISTIC,
    "late_critical": p.ENV_LATE_CRITICAL,
    "overlap_critical": p.ENV_OVERLAP_CRITICAL,
    "critical_period": p.ENV_CRITICAL_PERIOD,
    "outer_momentum": p.ENV_OUTER_MOMENTUM,
    "promotion_budget": p.ENV_PROMOTION_BUDGET,
}

# While from_env validates: the fields read from the environment and their variables.
_LABELS: ContextVar[Mapping[str, str] | None] = ContextVar("synclane_config_labels", default=None)


def _label(field: str) -> str:
    """The name to put in an error message: the variable the value came from, else the field."""
    labels = _LABELS.get()
    return field if labels is None else labels.get(field, field)


@contextmanager
def _labelled(labels: Mapping[str, str]) -> Iterator[None]:
    token = _LABELS.set(labels)
    try:
        yield
    finally:
        _LABELS.reset(token)


def _str(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _str(env, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def _int_or_none(env: Mapping[str, str], name: str) -> int | None:
    return None if _str(env, name) is None else _int(env, name, 0)


def _bool(env: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    raw = (_str(env, name) or ("1" if default else "0")).lower()
    if raw not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError(f"{name} must be 1 or 0 (true/false, yes/no), got {raw!r}")
    return raw in ("1", "true", "yes")


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    value = _float_or_none(env, name)
    return default if value is None else value


def _float_or_none(env: Mapping[str, str], name: str) -> float | None:
    raw = _str(env, name)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
