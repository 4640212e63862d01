"""Spawn torchrun in its own process group, and end that group for sure.

Celery prefork children may not fork multiprocessing children, so torchrun is a
plain subprocess in a new session; its pgid (= its pid) addresses every rank.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

PGID_FILE = "torchrun.pgid"


def spawn(argv: Sequence[str], *, env: Mapping[str, str], run_dir: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, output appended to ``run_dir/torchrun.log``.

    Writes ``run_dir/torchrun.pgid`` so that a stack shutdown can end a group whose
    supervisor died. The caller must call ``reap()`` when the process has ended.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "torchrun.log", "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=env.get("SYNCLANE_WORKDIR") or None,
        )
    (run_dir / PGID_FILE).write_text(str(proc.pid))
    return proc


def group_alive(pgid: int) -> bool:
    """Return True while any process of the group exists (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def terminate_group(proc: subprocess.Popen[bytes], *, grace_s: float) -> int:
    """SIGTERM the whole group, SIGKILL it after ``grace_s``; return the exit code.

    torchrun forwards SIGTERM to its ranks, which checkpoint and exit; a rank that
    hangs is killed with the rest of the group after the grace period.
    """
    pgid = proc.pid
    signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_group(pgid, signal.SIGKILL)
        proc.wait()
    # Ranks can outlive torchrun by a moment; the group must be empty before we return.
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_alive(pgid):
        signal_group(pgid, signal.SIGKILL)
    return proc.returncode


def reap(run_dir: Path) -> None:
    """Forget the pgid file once the group has ended."""
    (run_dir / PGID_FILE).unlink(missing_ok=True)


def kill_leftover_groups(jobs_dir: Path) -> list[int]:
    """SIGKILL every group named by a pgid file under ``jobs_dir``; return their pgids.

    Used when a whole stack stops: supervisors that died cannot end their runs.
    """
    killed: list[int] = []
    for pgid_file in jobs_dir.glob(f"*/{PGID_FILE}"):
        try:
            pgid = int(pgid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if group_alive(pgid):
            signal_group(pgid, signal.SIGKILL)
            killed.append(pgid)
        pgid_file.unlink(missing_ok=True)
    return killed
