"""Log tails of a run: rank 0, failing ranks, and torchrun's own log.

torchrun writes ``--log-dir=RUN_DIR/logs`` with ``--redirects=3`` as
``logs/<run id>_<suffix>/attempt_<n>/<local rank>/{stdout,stderr}.log``; the supervisor
appends torchrun's own output to ``RUN_DIR/torchrun.log``. Only the newest attempt counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TAIL_BYTES = 16_384
FAILURE = re.compile(r"Traceback|Error|error:|FAILED|Killed")


@dataclass(frozen=True)
class LogTail:
    name: str
    lines: list[str]
    failing: bool = False


def tail(path: Path, *, lines: int = 40) -> list[str]:
    """Return the last ``lines`` lines of ``path`` ([] if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def latest_attempt(logs_dir: Path) -> Path | None:
    """Return the newest ``attempt_<n>`` folder under ``logs_dir``, or None."""
    attempts = [p for p in logs_dir.glob("*/attempt_*") if p.is_dir()]
    if not attempts:
        return None
    return max(attempts, key=lambda p: (p.stat().st_mtime, _attempt_no(p)))


def run_log_tails(run_dir: Path, *, lines: int = 40) -> list[LogTail]:
    """Tails to show: rank 0, every other rank whose output shows a failure, torchrun.

    A rank's tail joins its stdout and stderr (stderr last: that is where a traceback is).
    """
    tails: list[LogTail] = []
    attempt = latest_attempt(run_dir / "logs")
    if attempt is not None:
        ranks = sorted(
            (p for p in attempt.iterdir() if p.is_dir() and p.name.isdigit()),
            key=lambda p: int(p.name),
        )
        for rank_dir in ranks:
            out = tail(rank_dir / "stdout.log", lines=lines) + tail(
                rank_dir / "stderr.log", lines=lines
            )
            failing = any(FAILURE.search(line) for line in out)
            if rank_dir.name == "0" or failing:
                tails.append(
                    LogTail(name=f"rank {rank_dir.name}", lines=out[-lines:], failing=failing)
                )
    torchrun = tail(run_dir / "torchrun.log", lines=lines)
    if torchrun:
        tails.append(
            LogTail(
                name="torchrun", lines=torchrun, failing=any(FAILURE.search(x) for x in torchrun)
            )
        )
    return tails


def _attempt_no(path: Path) -> int:
    try:
        return int(path.name.split("_", 1)[1])
    except (IndexError, ValueError):
        return -1
