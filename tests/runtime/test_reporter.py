"""Reporter and AllocationClient against a real, private redis-server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import warnings

import pytest
import redis

from tests.faults import RedisServer
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
    assert rep.flush(timeout=10)
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
        assert not rep.flush(timeout=1.0)  # nothing can be written
        rep.close(timeout=0.1)
    assert rep.errors >= 1 and rep.sent == 0
    assert rep.dropped == 3  # what was still buffered when the run closed
    assert len([w for w in caught if "telemetry write failed" in str(w.message)]) == 1


def test_a_training_step_does_not_wait_for_a_redis_that_does_not_answer() -> None:
    # A socket that takes connections and never answers: each write hangs for the 2 s timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)
        port = silent.getsockname()[1]
        rep = Reporter(redis_url=f"redis://127.0.0.1:{port}/0", job_id="13")
        started = time.perf_counter()
        for step in range(200):
            rep.log({"loss": 1.0}, step=step)
        elapsed = time.perf_counter() - started
        rep.close(timeout=0.1)
    assert elapsed < 1.0, f"200 log() calls took {elapsed:.2f} s while Redis hung"


def test_while_redis_is_down_the_buffer_keeps_the_newest_messages_and_counts_drops(
    tmp_path,
) -> None:
    server = RedisServer.start(tmp_path)
    server.kill()
    try:
        rep = Reporter(redis_url=server.url, job_id="14", buffer=10)
        for step in range(25):
            rep.log({"loss": 1.0}, step=step)
        time.sleep(0.3)  # the sender fails at least once meanwhile
        server.restart()
        assert rep.flush(timeout=20)
        rep.close()
        r = redis.Redis.from_url(server.url, decode_responses=True)
        assert [d["step"] for _, d in _entries(r, "14")] == list(range(15, 25))
        assert rep.dropped == 15 and rep.sent == 10 and rep.errors >= 1
        r.close()
    finally:
        server.stop()


def test_messages_logged_during_a_redis_restart_arrive_once_it_is_back(tmp_path) -> None:
    server = RedisServer.start(tmp_path)
    try:
        rep = Reporter(redis_url=server.url, job_id="15")
        rep.log({"loss": 3.0}, step=1)
        assert rep.flush(timeout=10)
        server.kill()
        for step in range(2, 6):
            rep.log({"loss": 3.0}, step=step)
        time.sleep(0.5)  # the sender fails at least once meanwhile
        server.restart()
        assert rep.flush(timeout=20), "the buffered messages were not sent after the restart"
        rep.close()
        r = redis.Redis.from_url(server.url, decode_responses=True)
        # The restart emptied Redis: what is there is exactly what was logged while it was down.
        assert [d["step"] for _, d in _entries(r, "15")] == [2, 3, 4, 5]
        assert r.smembers(p.ACTIVE_STREAMS_KEY) == {"15"}  # registered again
        assert rep.errors >= 1 and rep.dropped == 0
        r.close()
    finally:
        server.stop()


def test_the_allocation_client_reads_the_key_again_after_a_redis_restart(tmp_path) -> None:
    server = RedisServer.start(tmp_path)
    client = AllocationClient(redis_url=server.url, job_id="23", refresh_s=0.3)
    try:
        r = redis.Redis.from_url(server.url)
        r.set(p.allocation_key("23"), 5_000_000)
        client.start()
        assert client.current_bps() == 5_000_000
        server.kill()
        time.sleep(1.0)
        assert client.current_bps() == 5_000_000  # the last value holds while Redis is gone
        server.restart()
        r = redis.Redis.from_url(server.url)
        r.set(p.allocation_key("23"), 9_000_000)  # what the next scheduling pass writes
        assert client.wait_for_change(timeout=15) == 9_000_000
        r.close()
    finally:
        client.close()
        server.stop()


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


def test_a_script_that_exits_without_close_still_delivers_its_last_steps(
    redis_url: str, r: redis.Redis
) -> None:
    # The user guide's script never calls close(); its last metrics used to die with the
    # daemon sender thread at exit.
    script = (
        "from workers.runtime.reporter import Reporter\n"
        f"rep = Reporter(redis_url={redis_url!r}, job_id='31')\n"
        "for step in range(1, 301):\n"
        "    rep.log({'loss': 1.0 / step}, step=step)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    steps = [data["step"] for _, data in _entries(r, "31")]
    assert steps == list(range(1, 301))
