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


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (Linux /proc).

    torchrun starts each rank in a session of its own, so signalling torchrun's process
    group does not reach the ranks: they have to be found and signalled by pid.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pgid: int) -> None:
    """SIGKILL the group led by ``pgid`` and every process below its leader."""
    for pid in descendants(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    signal_group(pgid, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


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
    """SIGTERM torchrun's group, SIGKILL everything left after ``grace_s``; return its code.

    torchrun forwards SIGTERM to its ranks, which checkpoint and exit. The ranks live in
    sessions of their own, so they are collected first and checked (and killed) by pid:
    nothing of the run survives this call.
    """
    pgid = proc.pid
    ranks = descendants(pgid)
    signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_tree(pgid)
        proc.wait()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (
        group_alive(pgid) or any(pid_alive(pid) for pid in ranks)
    ):
        time.sleep(0.05)
    for pid in ranks:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
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
            kill_tree(pgid)
            killed.append(pgid)
        pgid_file.unlink(missing_ok=True)
    return killed
