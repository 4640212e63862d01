"""Reporter and AllocationClient against a real, private redis-server."""

from __future__ import annotations

import json
import time
import warnings

import pytest
import redis

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.reporter import AllocationClient, Reporter


def _entries(r: redis.Redis, job: str) -> list[tuple[str, dict[str, object]]]:
    return [(f["type"], json.loads(f["data"])) for _, f in r.xrange(p.telemetry_stream(job))]


def test_it_writes_metrics_to_the_jobs_stream_with_ts_and_rank(
    redis_url: str, r: redis.Redis
) -> None:
    rep = Reporter(redis_url=redis_url, job_id="7")
    before = time.time()
    rep.log({"loss": 2.5, "samples_per_s": 100}, step=3)
    rep.close()
    [(kind, data)] = _entries(r, "7")
    assert kind == p.MSG_METRICS
    assert data["loss"] == 2.5 and data["samples_per_s"] == 100 and data["step"] == 3
    assert data["rank"] == 0 and before <= float(data["ts"]) <= time.time()  # type: ignore[arg-type]


def test_it_registers_the_job_as_an_active_stream_on_first_write(
    redis_url: str, r: redis.Redis
) -> None:
    rep = Reporter(redis_url=redis_url, job_id="8")
    assert r.smembers(p.ACTIVE_STREAMS_KEY) == set()
    rep.log({"loss": 1.0}, step=1)
    rep.log({"loss": 0.9}, step=2)
    assert r.smembers(p.ACTIVE_STREAMS_KEY) == {"8"}
    rep.close()


def test_only_the_metrics_rank_writes_metrics_but_any_rank_raises_alarms(
    redis_url: str, r: redis.Redis
) -> None:
    rank1 = Reporter(redis_url=redis_url, job_id="9", rank=1)
    rank1.log({"loss": 1.0}, step=1)
    rank1.link(src=1, dst=0, step=1, latency_s=0.001, bandwidth_bps=1e9)
    rank1.event("resumed", resumed_from_step=4)
    rank1.alarm(p.ALARM_SYNC_DRIFT, value=0.3, threshold=0.1, step=1, detail="rank 1 drifted")
    rank1.close()
    [(kind, data)] = _entries(r, "9")
    assert kind == p.MSG_ALARM
    assert data == {
        "kind": "sync_drift",
        "state": "raised",
        "value": 0.3,
        "threshold": 0.1,
        "step": 1,
        "detail": "rank 1 drifted",
        "ts": data["ts"],
        "rank": 1,
    }


def test_link_and_event_messages_have_their_documented_fields(
    redis_url: str, r: redis.Redis
) -> None:
    rep = Reporter(redis_url=redis_url, job_id="10")
    rep.link(
        src=0, dst=1, step=5, latency_s=0.002, bandwidth_bps=8e8, jitter_s=0.0005, state="degraded"
    )
    rep.event("resumed", resumed_from_step=4)
    rep.close()
    (k1, link), (k2, event) = _entries(r, "10")
    assert (k1, k2) == (p.MSG_LINK, p.MSG_EVENT)
    assert {
        k: link[k]
        for k in ("src", "dst", "step", "latency_s", "bandwidth_bps", "jitter_s", "state")
    } == {
        "src": 0,
        "dst": 1,
        "step": 5,
        "latency_s": 0.002,
        "bandwidth_bps": 8e8,
        "jitter_s": 0.0005,
        "state": "degraded",
    }
    assert event["kind"] == "resumed" and event["resumed_from_step"] == 4


def test_it_rejects_an_unknown_alarm_state() -> None:
    with pytest.raises(ValueError, match="alarm state"):
        Reporter().alarm("sync_drift", value=1, threshold=1, step=1, state="maybe")


def test_without_a_control_plane_it_is_a_quiet_no_op() -> None:
    rep = Reporter.from_env(RuntimeConfig())
    assert rep.enabled is False
    rep.log({"loss": 1.0}, step=1)
    rep.alarm("sync_drift", value=1.0, threshold=0.5, step=1)
    rep.close()
    assert rep.errors == 0


def test_a_dead_redis_never_stops_training_and_warns_once() -> None:
    rep = Reporter(redis_url="redis://127.0.0.1:1/0", job_id="11")  # nothing listens on port 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            rep.log({"loss": 1.0}, step=step)
    rep.close()
    assert rep.errors == 3
    assert len([w for w in caught if "telemetry write failed" in str(w.message)]) == 1


def test_the_stream_is_capped_approximately(redis_url: str, r: redis.Redis) -> None:
    rep = Reporter(redis_url=redis_url, job_id="12")
    for step in range(p.STREAM_MAXLEN + 500):
        rep.log({"loss": 1.0}, step=step)
    rep.close()
    assert r.xlen(p.telemetry_stream("12")) < p.STREAM_MAXLEN + 500


def test_the_allocation_is_unlimited_until_the_control_plane_sets_one(
    redis_url: str, r: redis.Redis
) -> None:
    client = AllocationClient(redis_url=redis_url, job_id="20", refresh_s=0.5).start()
    try:
        assert client.current_bps() is None
        r.set(p.allocation_key("20"), 100_000_000)
        r.publish(p.allocation_channel("20"), "100000000")
        assert client.wait_for_change(timeout=3.0) == 100_000_000
    finally:
        client.close()


def test_the_allocation_follows_live_changes_even_without_a_nudge(
    redis_url: str, r: redis.Redis
) -> None:
    r.set(p.allocation_key("21"), 5_000_000)
    client = AllocationClient(redis_url=redis_url, job_id="21", refresh_s=0.3).start()
    try:
        assert client.current_bps() == 5_000_000
        r.set(p.allocation_key("21"), 7_000_000)  # no PUBLISH: the periodic re-read catches it
        assert client.wait_for_change(timeout=3.0) == 7_000_000
        r.delete(p.allocation_key("21"))
        assert client.wait_for_change(timeout=3.0) is None
    finally:
        client.close()


def test_without_a_control_plane_the_allocation_is_unlimited() -> None:
    client = AllocationClient.from_env(RuntimeConfig()).start()
    assert client.current_bps() is None
    client.close()


def test_a_zero_allocation_crawls_instead_of_blocking_forever(
    redis_url: str, r: redis.Redis
) -> None:
    r.set(p.allocation_key("22"), 0)
    client = AllocationClient(redis_url=redis_url, job_id="22").start()
    try:
        assert client.current_bps() == 1_000_000
    finally:
        client.close()
