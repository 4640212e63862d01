"""Two real beat processes on one Redis: one sends, the other waits; kill -9 the sender and the
other takes over within the lock's lifetime.

What a beat sends shows in its own log (Celery's "Sending due task" line), so the standby's
silence is read, not assumed. The beats use this pytest process's own Redis as broker; nothing
consumes what they send.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from workers.beat import LOCK_KEY, LOCK_TTL_S, STANDBY_S

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SENT = "Sending due task"


class Beat:
    def __init__(self, name: str, folder: Path, redis_url: str) -> None:
        self.log = folder / f"{name}.log"
        env = {**os.environ, "REDIS_URL": redis_url}
        argv = [
            sys.executable, "-m", "celery", "-A", "workers", "beat", "--loglevel=INFO",
            f"--schedule={folder / name}-schedule",
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def sent(self) -> int:
        return self.log.read_text(errors="replace").count(SENT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def wait_for(check: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


@pytest.fixture
def beats(tmp_path: Path, redis_url: str) -> Iterator[list[Beat]]:
    started = [Beat(name, tmp_path, redis_url) for name in ("first", "second")]
    yield started
    for beat in started:
        beat.kill()


def test_one_of_two_beats_sends_and_the_other_takes_over_when_it_is_killed(beats, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    by_pid = {beat.proc.pid: beat for beat in beats}

    def holder() -> Beat | None:
        owner = client.get(LOCK_KEY) or ""  # "<host>:<pid>:<id>"
        parts = owner.split(":")
        return by_pid.get(int(parts[1])) if len(parts) == 3 and parts[1].isdigit() else None

    leader = wait_for(holder, 90, "a beat to take the lock")
    assert isinstance(leader, Beat)
    standby = next(beat for beat in beats if beat is not leader)
    wait_for(lambda: leader.sent() >= 2, 60, "the leader to send")
    # Both have run for a while (the standby retries every STANDBY_S); only one sent anything.
    wait_for(lambda: "beat: Starting" in standby.log.read_text(errors="replace"), 60, "standby")
    time.sleep(3 * STANDBY_S)
    assert standby.sent() == 0, standby.log.read_text()[-2000:]
    assert holder() is leader

    leader.kill()
    killed_at = time.monotonic()
    wait_for(lambda: holder() is standby, LOCK_TTL_S + 30, "the standby to take the lock")
    took_over_s = time.monotonic() - killed_at
    assert took_over_s <= LOCK_TTL_S + STANDBY_S + 10  # 10 s for a loaded machine
    wait_for(lambda: standby.sent() >= 1, 60, "the new leader to send")
