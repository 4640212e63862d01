"""Who a run executes as, and which files it can reach.

Where the worker runs as root and SYNCLANE_RUN_AS names a user, job N's ranks run as uid
``uid(user) + N % SYNCLANE_RUN_AS_UIDS`` (group the same number), umask 077, in a run
folder the job owns with mode 0700: with a range of uids, no job can read another job's
folder, files or /proc entries. The control plane's own files under SYNCLANE_RUN_DIR
(database, logs, bundle store and cache) are made private to the worker's user; only
the jobs folder is left traversable (0711: enter, not list).
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunAs:
    uid: int
    gid: int


def run_as_for(job_id: int, *, user: str, uids: int) -> RunAs | None:
    """The identity job ``job_id`` runs as; None to keep the worker's own.

    Raises ValueError if ``user`` is set but unknown, or is root.
    """
    if not user:
        if os.geteuid() == 0:
            log.warning("job %s runs as root: set SYNCLANE_RUN_AS to an unprivileged user", job_id)
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"SYNCLANE_RUN_AS: no user {user!r} on this node") from None
    if entry.pw_uid == 0:
        raise ValueError("SYNCLANE_RUN_AS must name an unprivileged user, not root")
    uid = entry.pw_uid + job_id % max(1, uids)
    return RunAs(uid=uid, gid=uid)


def prepare_run_dir(run_dir: Path, run_as: RunAs | None) -> None:
    """Create the run folder 0700 and give it (and all in it) to the run's user."""
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run_dir, 0o700)
    if run_as is None:
        return
    jobs_dir = run_dir.parent
    os.chmod(jobs_dir, 0o711)  # enter your own folder, list nobody's
    for path in [run_dir, *run_dir.rglob("*")]:
        os.chown(path, run_as.uid, run_as.gid, follow_symlinks=False)


def make_control_files_private(run_root: Path, jobs_dir: Path) -> None:
    """Remove group/other access from everything under ``run_root`` except the jobs path.

    ``run_root`` itself and each folder on the way to ``jobs_dir`` keep only o+x, so a
    run's user can reach its own run folder and nothing beside it.
    """
    if not run_root.is_dir():
        return
    on_the_way = {run_root, *(p for p in jobs_dir.parents if _inside(p, run_root))}
    for folder in on_the_way:
        os.chmod(folder, 0o711)
        for entry in folder.iterdir():
            if entry in on_the_way or entry == jobs_dir or entry.is_symlink():
                continue
            mode = stat.S_IMODE(entry.stat().st_mode)
            if mode & 0o077:
                os.chmod(entry, mode & 0o700)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
