"""RuntimeConfig: read from env, validated at construction."""

from __future__ import annotations

import pytest

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.faults import FaultSpec


def test_it_defaults_to_full_sync_without_a_control_plane() -> None:
    cfg = RuntimeConfig.from_env({})
    assert cfg.sync == p.SYNC_FULL
    assert cfg.reporting is False
    assert cfg.link_mbps is None


def test_it_reads_the_supervisor_environment() -> None:
    cfg = RuntimeConfig.from_env(
        {
            p.ENV_JOB_ID: "42",
            p.ENV_REDIS_URL: "redis://127.0.0.1:7000/0",
            p.ENV_RUN_DIR: "/tmp/run-42",
            p.ENV_SYNC: "adaptive",
            p.ENV_LINK_MBPS: "100",
            p.ENV_DRIFT_THRESHOLD: "0.2",
            p.ENV_LOCAL_STEP_SCALE: "1.5",
            p.ENV_REISSUE_AFTER_S: "0.05",
            p.ENV_CRITICAL_SHARE: "0.1",
            p.ENV_OUTER_MOMENTUM: "0.5",
            p.ENV_PROMOTION_BUDGET: "0.1",
            p.ENV_OVERLAP_CRITICAL: "0",
            p.ENV_LATE_CRITICAL: "1",
            "RANK": "1",
            "WORLD_SIZE": "4",
        }
    )
    assert (cfg.job_id, cfg.run_dir, cfg.sync, cfg.link_mbps) == (
        "42",
        "/tmp/run-42",
        "adaptive",
        100.0,
    )
    assert (cfg.rank, cfg.world_size, cfg.drift_threshold) == (1, 4, 0.2)
    assert cfg.local_step_scale == 1.5
    assert cfg.reissue_after_s == 0.05
    assert cfg.critical_share == 0.1
    assert cfg.outer_momentum == 0.5
    assert cfg.promotion_budget == 0.1
    assert (cfg.overlap_critical, cfg.late_critical) == (False, True)
    assert cfg.reporting is True
    # Unset, critical parameters are averaged after the step (a default of 1, not 0).
    default = RuntimeConfig.from_env({})
    assert (default.overlap_critical, default.late_critical) == (True, False)
    # The critical averages' period: unset, the strategy's default; set, read as given.
    assert default.critical_period is None
    assert RuntimeConfig.from_env({p.ENV_CRITICAL_PERIOD: "3"}).critical_period == 3


def test_overrides_win_over_the_environment() -> None:
    cfg = RuntimeConfig.from_env({p.ENV_SYNC: "adaptive"}, sync="powersgd")
    assert cfg.sync == "powersgd"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {p.ENV_SYNC: "gossip"},
            "SYNCLANE_SYNC must be one of full, adaptive, powersgd, localsgd, none,",
        ),
        ({p.ENV_LINK_MBPS: "fast"}, "SYNCLANE_LINK_MBPS must be a number"),
        ({p.ENV_LINK_MBPS: "0"}, "SYNCLANE_LINK_MBPS must be > 0"),
        ({p.ENV_REDIS_URL: "http://x"}, "SYNCLANE_REDIS_URL must be a redis://"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, r"RANK must be in \[0, 2\)"),
        (
            {p.ENV_SYNC_PERIOD: "32", p.ENV_MAX_SYNC_PERIOD: "16"},
            "need 1 <= SYNCLANE_SYNC_PERIOD <= SYNCLANE_MAX_SYNC_PERIOD",
        ),
        ({p.ENV_SYNC_PERIOD: "40"}, "<= SYNCLANE_MAX_SYNC_PERIOD, got 40, 32"),  # the default
        ({p.ENV_DRIFT_THRESHOLD: "-1"}, "SYNCLANE_DRIFT_THRESHOLD must be > 0"),
        ({p.ENV_FAULT: "rank=1,speed=3"}, "SYNCLANE_FAULT: bad fault spec"),
        ({p.ENV_CRITICAL: "attn("}, "SYNCLANE_CRITICAL must be a regular expression"),
        ({p.ENV_LOCAL_STEP_SCALE: "0"}, "SYNCLANE_LOCAL_STEP_SCALE must be > 0"),
        ({p.ENV_CRITICAL_SHARE: "0"}, r"SYNCLANE_CRITICAL_SHARE must be in \(0, 1\], got 0"),
        ({p.ENV_CRITICAL_SHARE: "1.5"}, r"SYNCLANE_CRITICAL_SHARE must be in \(0, 1\]"),
        ({p.ENV_OUTER_MOMENTUM: "1"}, r"SYNCLANE_OUTER_MOMENTUM must be in \[0, 1\), got 1"),
        ({p.ENV_PROMOTION_BUDGET: "-0.1"}, r"SYNCLANE_PROMOTION_BUDGET must be in \[0, 1\)"),
        ({p.ENV_REISSUE_AFTER_S: "-0.1"}, "SYNCLANE_REISSUE_AFTER_S must be >= 0"),
        ({p.ENV_REISSUE_AFTER_S: "soon"}, p.ENV_REISSUE_AFTER_S),
        ({p.ENV_BUCKET_CAP_MB: "-2"}, "SYNCLANE_BUCKET_CAP_MB must be > 0"),
        ({p.ENV_PROBE_EVERY: "-1"}, "SYNCLANE_PROBE_EVERY must be >= 0"),
        ({p.ENV_TABLE_INTERVAL_S: "-0.1"}, "SYNCLANE_TABLE_INTERVAL_S must be >= 0"),
        ({p.ENV_OVERLAP_CRITICAL: "maybe"}, "SYNCLANE_OVERLAP_CRITICAL must be 1 or 0"),
        ({p.ENV_CRITICAL_PERIOD: "0"}, "SYNCLANE_CRITICAL_PERIOD must be >= 1, got 0"),
        ({p.ENV_CRITICAL_PERIOD: "two"}, "SYNCLANE_CRITICAL_PERIOD must be an integer"),
        (
            {p.ENV_CRITICAL_PERIOD: "1", p.ENV_OVERLAP_CRITICAL: "0"},
            "SYNCLANE_CRITICAL_PERIOD needs SYNCLANE_OVERLAP_CRITICAL on",
        ),
        (
            {p.ENV_LATE_CRITICAL: "1"},  # with the default overlap
            "SYNCLANE_LATE_CRITICAL needs SYNCLANE_OVERLAP_CRITICAL off",
        ),
        (
            {p.ENV_PROMOTION_BUDGET: "0.1"},  # with the default overlap
            "SYNCLANE_PROMOTION_BUDGET needs SYNCLANE_OVERLAP_CRITICAL off",
        ),
    ],
)
def test_it_rejects_invalid_settings_naming_the_variable_the_user_set(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RuntimeConfig.from_env(env)


def test_a_config_built_in_code_names_its_fields() -> None:
    with pytest.raises(ValueError, match="^link_mbps must be > 0"):
        RuntimeConfig(link_mbps=0)
    with pytest.raises(ValueError, match="^sync must be one of .*, none, got 'gossip'"):
        RuntimeConfig(sync="gossip")
    # An override passed to from_env is the caller's field, not a variable.
    with pytest.raises(ValueError, match="^link_mbps must be > 0"):
        RuntimeConfig.from_env({}, link_mbps=0)


def test_the_reissue_wait_defaults_to_the_jitter_threshold_and_zero_turns_it_off() -> None:
    assert RuntimeConfig(jitter_threshold_s=0.1).reissue_wait_s == 0.1
    assert RuntimeConfig(jitter_threshold_s=0.1, reissue_after_s=0.03).reissue_wait_s == 0.03
    assert RuntimeConfig(reissue_after_s=0.0).reissue_wait_s is None


def test_it_is_frozen() -> None:
    cfg = RuntimeConfig()
    with pytest.raises(AttributeError):
        cfg.sync = "adaptive"  # type: ignore[misc]


def test_a_fault_spec_applies_to_one_rank_from_a_step() -> None:
    fault = FaultSpec.parse("rank=1,from_step=5,until_step=8,delay_s=0.3")
    assert fault.delay_s == 0.3
    assert [fault.active(1, s) for s in (4, 5, 7, 8)] == [False, True, True, False]
    assert not fault.active(0, 6)
    assert fault.blip is False
    assert FaultSpec.parse("rank=1,delay_s=0.06,blip=1").blip is True


def test_a_fault_delays_first_attempts_and_retries_unless_it_is_a_blip() -> None:
    persistent = FaultSpec.parse("rank=1,from_step=5,delay_s=0.3")
    blip = FaultSpec.parse("rank=1,from_step=5,delay_s=0.3,blip=1")
    assert persistent.delays(1, 5) == (0.3, 0.3)
    assert blip.delays(1, 5) == (0.3, 0.0)
    assert blip.delays(1, 4) == blip.delays(0, 5) == (0.0, 0.0)
    assert FaultSpec.parse("rank=1,bandwidth_factor=0.5").delays(1, 9) == (0.0, 0.0)


def test_a_fault_spec_must_do_something() -> None:
    with pytest.raises(ValueError, match="needs delay_s"):
        FaultSpec.parse("rank=1")
