"""The wire contract between a run and the control plane (stdlib only).

A run never talks to the database. It talks to Redis:

* telemetry: the run XADDs messages to ``telemetry_stream(job_id)``; each entry has
  two fields, ``type`` (one of MESSAGE_TYPES) and ``data`` (a JSON object).
  The control plane's ingest loop reads every stream named in ACTIVE_STREAMS_KEY.
* allocation: the control plane SETs ``allocation_key(job_id)`` to the job's
  bandwidth allocation in bit/s (a decimal integer; absent means "unlimited")
  and PUBLISHes the same value on ``allocation_channel(job_id)`` as a nudge.

The supervisor configures a run through the ENV_* environment variables.
"""

from __future__ import annotations

from typing import Final

# Environment variables the supervisor sets for every rank.
ENV_JOB_ID: Final = "SYNCLANE_JOB_ID"
ENV_REDIS_URL: Final = "SYNCLANE_REDIS_URL"
ENV_RUN_DIR: Final = "SYNCLANE_RUN_DIR"
ENV_SYNC: Final = "SYNCLANE_SYNC"
ENV_LINK_MBPS: Final = "SYNCLANE_LINK_MBPS"

# Message types carried on a telemetry stream.
MSG_METRICS: Final = "metrics"
MSG_LINK: Final = "link"
MSG_ALARM: Final = "alarm"
MSG_EVENT: Final = "event"
MESSAGE_TYPES: Final = (MSG_METRICS, MSG_LINK, MSG_ALARM, MSG_EVENT)

ACTIVE_STREAMS_KEY: Final = "synclane:telemetry:active"
STREAM_MAXLEN: Final = 10_000


def telemetry_stream(job_id: int | str) -> str:
    """Return the Redis stream key that carries a job's telemetry."""
    return f"synclane:telemetry:{job_id}"


def allocation_key(job_id: int | str) -> str:
    """Return the Redis key that holds a job's bandwidth allocation in bit/s."""
    return f"synclane:alloc:{job_id}"


def allocation_channel(job_id: int | str) -> str:
    """Return the pub/sub channel that announces a new allocation for a job."""
    return f"synclane:alloc:{job_id}:nudge"


# --- Added by the runtime (phase 1+). Names above are frozen; these extend them. ---

# Sync strategies a job may ask for (ENV_SYNC / the workload's --sync flag).
SYNC_FULL: Final = "full"
SYNC_ADAPTIVE: Final = "adaptive"
SYNC_POWERSGD: Final = "powersgd"
SYNC_LOCALSGD: Final = "localsgd"
SYNC_STRATEGIES: Final = (SYNC_FULL, SYNC_ADAPTIVE, SYNC_POWERSGD, SYNC_LOCALSGD)
# Benchmark-only: no gradient communication (the no-communication ceiling). Not offered to jobs.
SYNC_NONE: Final = "none"

# Optional per-job tuning, all read by RuntimeConfig.from_env().
ENV_DRIFT_THRESHOLD: Final = "SYNCLANE_DRIFT_THRESHOLD"  # relative drift, float > 0
# The drift threshold when a job sets none (the dashboard draws it on the drift chart).
DEFAULT_DRIFT_THRESHOLD: Final = 0.08
ENV_SYNC_PERIOD: Final = "SYNCLANE_SYNC_PERIOD"  # initial global-sync period H, int >= 1
ENV_MAX_SYNC_PERIOD: Final = "SYNCLANE_MAX_SYNC_PERIOD"  # upper bound of H, int >= 1
ENV_JITTER_THRESHOLD_S: Final = "SYNCLANE_JITTER_THRESHOLD_S"  # link_degraded trigger, seconds
ENV_PROBE_EVERY: Final = "SYNCLANE_PROBE_EVERY"  # steps between link probes, 0 = never
# Agreed step time between two agreed tables, seconds (full, powersgd, localsgd, adaptive
# while it averages everything); 0: a table after every step.
ENV_TABLE_INTERVAL_S: Final = "SYNCLANE_TABLE_INTERVAL_S"
ENV_REISSUE_AFTER_S: Final = "SYNCLANE_REISSUE_AFTER_S"  # late-chunk re-issue; 0: never
ENV_FAULT: Final = "SYNCLANE_FAULT"  # fault injector spec, see workers.runtime.faults
ENV_CRITICAL: Final = "SYNCLANE_CRITICAL"  # regex of critical parameter names (adaptive)
# adaptive, when no parameter name matches: share of the parameter bytes made critical by
# measured movement at the end of warm-up.
ENV_CRITICAL_SHARE: Final = "SYNCLANE_CRITICAL_SHARE"
# "1": adaptive decides on a fixed schedule, never from measured timing (reproducible runs).
ENV_DETERMINISTIC: Final = "SYNCLANE_DETERMINISTIC"
# "1": adaptive applies each step's critical gradient average at the next step (one step
# stale), so it crosses the link while that step computes.
ENV_LATE_CRITICAL: Final = "SYNCLANE_LATE_CRITICAL"
# "1" (the default): adaptive averages the critical parameters after the step (every
# SYNCLANE_CRITICAL_PERIOD steps), overlapped with the next step; "0": their gradients in
# backward.
ENV_OVERLAP_CRITICAL: Final = "SYNCLANE_OVERLAP_CRITICAL"
# Steps between adaptive's averages of the critical parameters (with the above on); 2 unset.
ENV_CRITICAL_PERIOD: Final = "SYNCLANE_CRITICAL_PERIOD"
# Momentum in [0, 1) on adaptive's periodic averages of the non-critical parameters (SlowMo);
# 0 (the default): plain averages.
ENV_OUTER_MOMENTUM: Final = "SYNCLANE_OUTER_MOMENTUM"
# Share in [0, 1) of the parameter bytes that adaptive may promote to critical by measured
# movement during training; 0 (the default): none.
ENV_PROMOTION_BUDGET: Final = "SYNCLANE_PROMOTION_BUDGET"
# Factor on non-critical params' local optimizer steps (adaptive); unset: world size^0.8
# for second-moment optimizers (Adam, RMSprop, ...), 1 otherwise.
ENV_LOCAL_STEP_SCALE: Final = "SYNCLANE_LOCAL_STEP_SCALE"
ENV_BUCKET_CAP_MB: Final = "SYNCLANE_BUCKET_CAP_MB"  # DDP bucket size; unset: strategy default
# adaptive's wire format with error feedback: bf16 (default), fp16 or none (fp32).
ENV_COMPRESS: Final = "SYNCLANE_COMPRESS"
ENV_METRICS_RANK: Final = "SYNCLANE_METRICS_RANK"  # rank that writes metrics/link/event
ENV_CHECKPOINT_EVERY: Final = "SYNCLANE_CHECKPOINT_EVERY"  # the job's checkpoint interval (steps)
ENV_STEPS: Final = "SYNCLANE_STEPS"  # the job's step count, for tenant scripts that want it

# Alarm kinds carried by MSG_ALARM messages (data field ``kind``).
ALARM_SYNC_DRIFT: Final = "sync_drift"
ALARM_LINK_DEGRADED: Final = "link_degraded"
ALARM_STRAGGLER: Final = "straggler"
ALARM_KINDS: Final = (ALARM_SYNC_DRIFT, ALARM_LINK_DEGRADED, ALARM_STRAGGLER)
ALARM_STATES: Final = ("raised", "cleared")

# Per-step figures a workload reports beside the session's (the built-ins do; a tenant's
# script may): the dashboard draws these and the figures derived from them.
WORKLOAD_FIGURES: Final = (
    "loss",
    "val_loss",
    "samples_per_s",
    "tokens_per_s",
    "step_time_s",
    "allocation_bps",
)

# Per-step figures of the runtime's session (SyncSession.pop_step_stats): the communication
# counters, the link monitor's figures, and the strategy's (adaptive reports all of these,
# localsgd only sync_period). A workload forwards the last two groups and busbw_bps in its
# metrics messages, where the dashboard reads them.
COMM_FIGURES: Final = (
    "comm_time_s",
    "comm_busy_s",
    "bytes_sent",
    "payload_bytes",
    "collectives",
    "busbw_bps",
)
LINK_FIGURES: Final = (
    "exposed_comm_s",
    "sync_delay_s",
    "jitter_s",
    "chunk_bytes",
    "reissued",
    "link_rate_bps",
)
STRATEGY_FIGURES: Final = (
    "drift",
    "sync_period",
    "grad_norm_var",
    "loss_descent_rate",
    "critical_fraction",
    "sync_enhanced",
    "fast_link",
)

# Exit codes of a worker process (a workload under torchrun). torchrun itself flattens a
# failed worker to exit status 1, so a worker also writes ``RUN_DIR/exit.json``
# (``{"code": int, "reason": str, "step": int}``) for the supervisor to read.
EXIT_OK: Final = 0
EXIT_STOPPED_AFTER_CHECKPOINT: Final = 75  # SIGTERM/SIGINT: checkpoint written, resumable
EXIT_LINK_FAILED: Final = 76  # link stayed degraded past escalation; checkpoint written

# File names inside a run directory.
CHECKPOINT_PREFIX: Final = (
    "ckpt-"  # ckpt-<step:08d>.pt + ckpt-<step:08d>.pt.sha256 (checkpoint_files)
)
EXIT_FILE: Final = "exit.json"
