"""Runtime configuration: one frozen dataclass, read from the environment the supervisor sets.

    cfg = RuntimeConfig.from_env()          # reads SYNCLANE_* and torchrun's RANK/WORLD_SIZE
    cfg = RuntimeConfig(sync="adaptive")    # or build one in code (tests, user scripts)

Invalid values fail loudly (``ValueError`` naming the variable or field) at start-up rather
than surfacing as a strange hang in the middle of a collective.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from workers.runtime import protocol as p


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
    sync_period: int = 8  # initial H: global sync of non-critical params every H steps
    max_sync_period: int = 32  # upper bound of H (the allocation bound stops here)
    # DDP bucket size (fusion of small tensors into buckets); None: the strategy's default,
    # 1 MB, or 64 KB for adaptive, whose critical slices then leave during backward.
    bucket_cap_mb: float | None = None
    chunk_kb: int = 1024  # initial/maximum engine chunk; AIMD shrinks it on a degraded link
    warmup_steps: int = 10  # steps of full sync before adaptive/powersgd/localsgd start
    powersgd_rank: int = 2  # PowerSGD matrix approximation rank
    # adaptive: factor on non-critical params' local optimizer steps; None = automatic
    # (sqrt(world size) for second-moment optimizers, 1 otherwise; see strategies.Adaptive).
    local_step_scale: float | None = None

    # Drift monitor.
    drift_threshold: float = 0.08  # relative L2 distance from the last global sync

    # Link emulation, throttle and health.
    link_mbps: float | None = None
    jitter_threshold_s: float = 0.25
    # On a degraded link, a gradient chunk this late is re-issued once (workers.runtime.reissue);
    # None: jitter_threshold_s; 0: never.
    reissue_after_s: float | None = None
    probe_every: int = 50  # steps between link probes; 0 disables probes
    fault: str | None = None  # fault-injector spec (workers.runtime.faults)

    def __post_init__(self) -> None:
        if self.job_id is not None and not self.job_id.strip():
            raise ValueError("job_id must be non-empty when set")
        if self.redis_url is not None and not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ValueError(
                f"redis_url must be a redis://, rediss:// or unix:// URL, got {self.redis_url!r}"
            )
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        for name in ("rank", "metrics_rank"):
            value = getattr(self, name)
            if not 0 <= value < self.world_size:
                raise ValueError(f"{name} must be in [0, {self.world_size}), got {value}")
        if self.sync not in (*p.SYNC_STRATEGIES, p.SYNC_NONE):
            raise ValueError(
                f"sync must be one of {', '.join(p.SYNC_STRATEGIES)}, got {self.sync!r}"
            )
        if not 1 <= self.sync_period <= self.max_sync_period:
            raise ValueError(
                f"need 1 <= sync_period <= max_sync_period, got {self.sync_period}, {self.max_sync_period}"
            )
        if self.bucket_cap_mb is not None:
            _require_positive("bucket_cap_mb", self.bucket_cap_mb)
        if self.chunk_kb < 64:
            raise ValueError(f"chunk_kb must be >= 64, got {self.chunk_kb}")
        if self.warmup_steps < 0 or self.powersgd_rank < 1:
            raise ValueError("warmup_steps must be >= 0 and powersgd_rank >= 1")
        _require_positive("drift_threshold", self.drift_threshold)
        _require_positive("jitter_threshold_s", self.jitter_threshold_s)
        if self.link_mbps is not None:
            _require_positive("link_mbps", self.link_mbps)
        if self.reissue_after_s is not None and not self.reissue_after_s >= 0:
            raise ValueError(f"reissue_after_s must be >= 0, got {self.reissue_after_s}")
        if self.local_step_scale is not None:
            _require_positive("local_step_scale", self.local_step_scale)
        if self.probe_every < 0:
            raise ValueError(f"probe_every must be >= 0, got {self.probe_every}")
        if self.critical is not None:
            try:
                re.compile(self.critical)
            except re.error as exc:
                raise ValueError(f"critical must be a regular expression: {exc}") from None
        if self.fault is not None:
            from workers.runtime.faults import FaultSpec  # validate eagerly; stdlib only

            FaultSpec.parse(self.fault)

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
            "drift_threshold": _float(e, p.ENV_DRIFT_THRESHOLD, 0.08),
            "link_mbps": _float_or_none(e, p.ENV_LINK_MBPS),
            "jitter_threshold_s": _float(e, p.ENV_JITTER_THRESHOLD_S, 0.25),
            "reissue_after_s": _float_or_none(e, p.ENV_REISSUE_AFTER_S),
            "probe_every": _int(e, p.ENV_PROBE_EVERY, 50),
            "fault": _str(e, p.ENV_FAULT),
            "critical": _str(e, p.ENV_CRITICAL),
            "local_step_scale": _float_or_none(e, p.ENV_LOCAL_STEP_SCALE),
            "bucket_cap_mb": _float_or_none(e, p.ENV_BUCKET_CAP_MB),
        }
        values.update(overrides)
        return cls(**values)


def _require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


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
