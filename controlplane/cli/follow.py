"""``synclane logs -f``: print a rank's new log lines until the job ends.

Each read asks the API for what follows the last byte offset; a failed read (server
restarting, network gone, a proxy's 502/503/504) is retried with a growing wait, and the
offset makes the next good read print exactly the lines that were missed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from controlplane.cli.client import Api, CliError
from controlplane.cli.watch import TERMINAL, Backoff

T = TypeVar("T")


def retrying(
    call: Callable[[], T],
    *,
    give_up_after_s: float = 300.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried with a growing wait while the server cannot be reached (or a proxy
    says it is not there right now), for at most ``give_up_after_s``."""
    backoff, failing_since = Backoff(), None
    while True:
        try:
            return call()
        except CliError as exc:
            if not exc.retryable:
                raise
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > give_up_after_s:
                raise
            sleep(backoff.next())


def follow_logs(
    api: Api,
    job_id: int,
    *,
    rank: int,
    stream: str,
    offset: int,
    interval: float = 1.0,
    give_up_after_s: float = 300.0,
    write: Callable[[str], object] = sys.stdout.write,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Print lines after ``offset`` until the job is finished and nothing is left to read."""

    def read() -> tuple[bool, dict[str, Any]]:
        done = api.get(f"/api/v1/jobs/{job_id}/")["status"] in TERMINAL
        page = api.get(f"/api/v1/jobs/{job_id}/logs/", rank=rank, stream=stream, after=offset)
        return done, page

    while True:
        done, page = retrying(read, give_up_after_s=give_up_after_s, sleep=sleep)
        for line in page["lines"]:
            write(line + "\n")
        if hasattr(sys.stdout, "flush"):
            sys.stdout.flush()
        moved, offset = page["offset"] != offset, page["offset"]
        if done and not moved:
            return
        if not moved:
            sleep(interval)
