"""``synclane logs -f``: print a rank's new log lines until the job ends.

Each read asks the API for what follows the last byte offset; a failed read (server
restarting, network gone, a proxy's 502/503/504) is retried with a growing wait, and the offset makes the next
good read print exactly the lines that were missed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from controlplane.cli.client import Api, CliError
from controlplane.cli.watch import TERMINAL, Backoff


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
    backoff, failing_since = Backoff(), None
    while True:
        try:
            done = api.get(f"/api/v1/jobs/{job_id}/")["status"] in TERMINAL
            page = api.get(f"/api/v1/jobs/{job_id}/logs/", rank=rank, stream=stream, after=offset)
        except CliError as exc:
            if not exc.retryable:
                raise
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > give_up_after_s:
                raise
            sleep(backoff.next())
            continue
        failing_since = None
        backoff.reset()
        for line in page["lines"]:
            write(line + "\n")
        if hasattr(sys.stdout, "flush"):
            sys.stdout.flush()
        moved, offset = page["offset"] != offset, page["offset"]
        if done and not moved:
            return
        if not moved:
            sleep(interval)
