"""Waiting for a run's process: the wait ends at the exit, not at the end of a sleep."""

from __future__ import annotations

import subprocess
import sys
import time

from workers.supervisor import process


def child(seconds: float, code: int = 0) -> subprocess.Popen[bytes]:
    script = f"import sys, time; time.sleep({seconds}); sys.exit({code})"
    return subprocess.Popen([sys.executable, "-c", script])


def test_the_wait_ends_when_the_process_exits_long_before_the_timeout() -> None:
    proc = child(0.2, code=3)
    began = time.monotonic()
    assert process.wait_exit(proc, timeout=60) == 3
    # 60 s was allowed; the exit came after 0.2 s (plus start-up, slow on a loaded machine).
    assert time.monotonic() - began < 30


def test_a_process_still_running_at_the_timeout_gives_none() -> None:
    proc = child(60)
    try:
        assert process.wait_exit(proc, timeout=0.1) is None
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_process_already_ended_gives_its_code_at_once() -> None:
    proc = child(0, code=5)
    proc.wait()
    assert process.wait_exit(proc, timeout=60) == 5
