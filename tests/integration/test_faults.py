"""kill -9 Redis or the ASGI server under a running job, then bring it back.

Everything is real: the stack's own redis-server, Celery beat and worker, ingest, daphne,
a 2-rank torchrun, and a websocket client that reconnects the way the job page does.
"""

from __future__ import annotations

import time

import pytest

from tests.faults import FaultStack, ReconnectingListener, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

STEPS = 400
OUTAGE_S = 3.0
# The long jobs must outlive a fault however fast the machine computes: a bandwidth ceiling
# paces each step's gradient sync (tiny_gpt's 455 KB at 20 Mbit/s: about 0.18 s), so 400
# steps take over a minute. Unpaced, on an idle machine, a job once ended during the outage.
PACED_MBPS = 20


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> FaultStack:
    stack = FaultStack.start(tmp_path_factory.mktemp("faults"), SYNCLANE_CHECKPOINT_EVERY="25")
    yield stack
    stack.stop()


def submit(faults: FaultStack, token: str, name: str, steps: int = STEPS) -> dict:
    body = {
        "tenant": "vision",
        "name": name,
        "workload": "tiny_gpt",
        "world_size": 2,
        "steps": steps,
        "sync": "full",
        "bandwidth_ceiling_mbps": PACED_MBPS,
    }
    status, job, _ = faults.call("POST", "/api/v1/jobs/", body, token=token)
    assert status == 201, job
    return dict(job)


def jobs_named(faults: FaultStack, token: str, name: str) -> list[dict]:
    status, body, _ = faults.call("GET", f"/api/v1/jobs/?name={name}", token=token)
    assert status == 200, body
    return [job for job in body["results"] if job["name"] == name]


def stored_steps(faults: FaultStack, job_id: int, cookie: str) -> list[int]:
    """Every step whose metrics the database kept (the job page's history)."""
    status, body, _ = faults.call(
        "GET", f"/jobs/{job_id}/history.json", headers={"Cookie": f"sessionid={cookie}"}
    )
    assert status == 200, body
    return sorted(set(body["metrics"]["loss"]["x"]))


def test_after_redis_restarts_telemetry_resumes_and_the_job_finishes_once(faults):
    token, cookie = faults.token(), faults.session_cookie()
    job = submit(faults, token, "through-a-redis-restart")
    listener = ReconnectingListener(faults, job["id"], cookie)
    listener.start()
    try:
        wait_until(lambda: len(listener.metrics()) >= 5, timeout=180, what="live metrics")
        worker_pid = faults.stack.get("worker").proc.pid

        faults.redis.kill()
        time.sleep(OUTAGE_S)
        faults.redis.restart()
        back = time.monotonic()

        fresh = wait_until(
            lambda: listener.metrics(after=back), timeout=30, what="metrics after Redis returned"
        )
        done = faults.wait_for_status(
            job["id"], token, {"succeeded", "failed", "cancelled"}, timeout=300
        )
    finally:
        listener.stop()

    print(f"telemetry back on the websocket {fresh[0].at - back:.1f} s after Redis returned")
    assert done["status"] == "succeeded", done
    assert done["restarts"] == 0 and done["last_step"] == STEPS
    # The worker reconnected by itself: the restarter did not have to start another one.
    assert faults.stack.get("worker").proc.pid == worker_pid
    assert [j["id"] for j in jobs_named(faults, token, "through-a-redis-restart")] == [job["id"]]
    # The run's reporter buffered what it logged during the outage: no step is missing.
    assert stored_steps(faults, job["id"], cookie) == list(range(1, STEPS + 1))


def test_a_submit_while_redis_is_down_is_accepted_and_admitted_once_it_is_back(faults):
    token = faults.token()
    faults.redis.kill()
    try:
        started = time.monotonic()
        job = submit(faults, token, "submitted-during-an-outage", steps=20)
        answered_s = time.monotonic() - started
        time.sleep(2.0)
        assert faults.job(job["id"], token)["status"] == "queued"  # nobody can admit it yet
    finally:
        faults.redis.restart()

    assert job["status"] == "queued" and answered_s < 10, (job, answered_s)
    faults.wait_for_status(job["id"], token, {"admitted", "running", "succeeded"}, timeout=60)
    done = faults.wait_for_status(
        job["id"], token, {"succeeded", "failed", "cancelled"}, timeout=180
    )
    assert done["status"] == "succeeded", done
    assert len(jobs_named(faults, token, "submitted-during-an-outage")) == 1


def test_after_the_asgi_server_is_killed_and_restarted_nothing_is_lost(faults):
    token, cookie = faults.token(), faults.session_cookie()
    job = submit(faults, token, "through-an-asgi-restart")
    listener = ReconnectingListener(faults, job["id"], cookie)
    listener.start()
    try:
        wait_until(lambda: len(listener.metrics()) >= 5, timeout=180, what="live metrics")
        committed = submit(faults, token, "answered-just-before-the-kill", steps=20)

        faults.kill("asgi")
        with pytest.raises(OSError):  # really down: nothing answers on the port
            faults.call("GET", "/healthz")
        faults.wait_for_asgi()  # the devstack's restarter starts it again, same port
        back = time.monotonic()

        wait_until(
            lambda: listener.metrics(after=back), timeout=30, what="metrics after the restart"
        )
        done = faults.wait_for_status(
            job["id"], token, {"succeeded", "failed", "cancelled"}, timeout=300
        )
    finally:
        listener.stop()

    assert listener.connections >= 2, "the websocket client never reconnected"
    assert done["status"] == "succeeded" and done["restarts"] == 0, done
    assert stored_steps(faults, job["id"], cookie) == list(range(1, STEPS + 1))
    assert [j["id"] for j in jobs_named(faults, token, "answered-just-before-the-kill")] == [
        committed["id"]
    ]
    other = faults.wait_for_status(
        committed["id"], token, {"succeeded", "failed", "cancelled"}, timeout=180
    )
    assert other["status"] == "succeeded", other
