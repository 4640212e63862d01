"""Spawn torchrun in its own process group, and end that group for sure.

Celery prefork children may not fork multiprocessing children, so torchrun is a
plain subprocess in a new session; its pgid (= its pid) addresses every rank.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

PGID_FILE = "torchrun.pgid"


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    run_dir: Path,
    cwd: Path | None = None,
    uid: int | None = None,
    gid: int | None = None,
    tag: str = "",
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, output appended to ``run_dir/torchrun<tag>.log``.

    ``tag`` tells apart the nodes of a run across nodes, which share its run folder: node
    rank 0 (and a run on one node) has none, node rank i has ``.node<i>``.

    With ``uid``/``gid`` the process (and so every rank) runs as that user, with no
    supplementary groups and umask 077. Writes ``run_dir/torchrun<tag>.pgid`` so that a stack
    shutdown can end a group whose supervisor died. The caller must call ``reap()`` when
    the process has ended.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    private = uid is not None
    # O_NOFOLLOW: the run folder may belong to the run's user; never follow its links.
    log_fd = os.open(
        run_dir / f"torchrun{tag}.log",
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
        0o600,
    )
    with os.fdopen(log_fd, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            user=uid,
            group=gid,
            extra_groups=[] if private else None,
            umask=0o077 if private else -1,
        )
    pgid_path = run_dir / pgid_name(tag)
    pgid_path.unlink(missing_ok=True)
    fd = os.open(pgid_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as pgid_file:
        pgid_file.write(str(proc.pid))
    return proc


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """Wait up to ``timeout`` seconds for ``proc`` to end; return its exit code, or None.

    Wakes at the exit itself (it polls a pidfd for the child), not at the end of a sleep, so
    a run that ends frees its slot at once, and a long run costs no wake-ups in between.
    Where pidfds are missing (not Linux) it sleeps ``timeout`` instead.
    """
    if (code := proc.poll()) is not None:
        return code
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        time.sleep(timeout)
        return proc.poll()
    try:
        waiter = select.poll()
        waiter.register(fd, select.POLLIN)
        waiter.poll(max(0, int(timeout * 1000)))
    finally:
        os.close(fd)
    return proc.poll()


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


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


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


def pgid_name(tag: str = "") -> str:
    return f"torchrun{tag}.pgid"


def reap(run_dir: Path, tag: str = "") -> None:
    """Forget the pgid file once the group has ended."""
    (run_dir / pgid_name(tag)).unlink(missing_ok=True)


def kill_leftover_groups(jobs_dir: Path) -> list[int]:
    """SIGKILL every group named by a pgid file under ``jobs_dir``; return their pgids.

    Used when a whole stack stops: supervisors that died cannot end their runs.
    """
    killed: list[int] = []
    for found in jobs_dir.glob("*/torchrun*.pgid"):
        # A run's user owns its run folder: a pgid file it put there is not ours to obey.
        if found.is_symlink() or found.stat().st_uid != os.geteuid():
            continue
        try:
            pgid = int(found.read_text().strip())
        except (OSError, ValueError):
            continue
        if group_alive(pgid):
            kill_tree(pgid)
            killed.append(pgid)
        found.unlink(missing_ok=True)
    return killed


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ("" if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_run_of(pgid: int, run_dir: Path) -> bool:
    """True if ``pgid`` still leads the torchrun of ``run_dir`` (not a reused pid)."""
    return pid_alive(pgid) and f"--run-dir={run_dir}" in cmdline(pgid)


def stop_orphan(pgid: int, *, grace_s: float) -> None:
    """SIGTERM a run whose supervisor died; SIGKILL what is left after ``grace_s``.

    Like ``terminate_group`` for a torchrun that is not our child (no exit status to wait
    for): its ranks checkpoint on SIGTERM and exit; liveness is judged by pid.
    """
    ranks = descendants(pgid)
    signal_group(pgid, signal.SIGTERM)
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in [pgid, *ranks]):
        time.sleep(0.1)
    for pid in [*ranks, pgid]:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    signal_group(pgid, signal.SIGKILL)
