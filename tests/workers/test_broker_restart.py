"""kill -9 Redis under a live Celery worker that holds a late-acknowledged task.

The worker is a real process (prefork pool) on a private redis-server; the fix under test
is workers/broker.py. Without it the worker exits with "Unrecoverable error:
AttributeError 'NoneType' object has no attribute 'hostname'" as soon as Redis dies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import RedisServer, wait_until
from tests.workers import broker_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HOLD_S = 12.0


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer.start(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def worker(redis_server: RedisServer, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "BROKER_TEST_URL": redis_server.url}
    argv = [sys.executable, "-m", "celery", "-A", "tests.workers.broker_app", "worker"]
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [*argv, "--concurrency", "2", "--loglevel", "info", "--without-heartbeat"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
    print((tmp_path / "worker.log").read_text()[-4000:])


def send(redis_server: RedisServer, task, *args) -> None:
    """Enqueue ``task`` on the test's Redis (a fresh connection: Redis may have restarted)."""
    with broker_app.app.connection_for_write(redis_server.url) as conn:
        task.apply_async(args=args, connection=conn)


def ran(path: Path) -> bool:
    return path.exists()


def test_a_worker_outlives_a_redis_kill_under_a_late_acked_task_and_still_runs_tasks(
    redis_server, worker, tmp_path
):
    send(redis_server, broker_app.touch, str(tmp_path / "ready"))
    wait_until(lambda: ran(tmp_path / "ready"), timeout=90, what="the worker's first task")
    started, done = tmp_path / "started", tmp_path / "done"
    send(redis_server, broker_app.hold, str(started), str(done), HOLD_S)
    wait_until(lambda: ran(started), timeout=60, what="the held task to start")

    redis_server.kill()
    redis_server.restart()

    send(redis_server, broker_app.touch, str(tmp_path / "after"))
    wait_until(lambda: ran(tmp_path / "after"), timeout=90, what="a task after Redis returned")
    wait_until(lambda: ran(done), timeout=90, what="the held task to end")
    # Its late acknowledgement went to the lost connection: that must not end the worker.
    send(redis_server, broker_app.touch, str(tmp_path / "after-ack"))
    wait_until(lambda: ran(tmp_path / "after-ack"), timeout=90, what="a task after the ack")
    assert worker.poll() is None, "the worker exited"
    # The same worker process ran the tasks before and after (its pool children write it).
    assert int((tmp_path / "after-ack").read_text()) == worker.pid
    assert "Unrecoverable error" not in (tmp_path / "worker.log").read_text()
