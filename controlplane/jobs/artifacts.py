"""A job's artifacts: the regular files under its run folder, listed, opened, counted.

The run folder is written by the tenant's own code, so nothing in it is trusted: a symbolic
link (to a file of the control plane, or of another job) is neither listed nor opened, and a
requested path is opened one component at a time with ``O_NOFOLLOW`` relative to the folder
above it, so no link swapped in between a check and the open is followed either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from django.conf import settings

LIST_LIMIT = 2000  # most files one listing returns (the total still counts every file)


class ArtifactPathError(ValueError):
    """A requested path that could never name an artifact (bad input, not a missing file)."""


@dataclass(frozen=True)
class Artifact:
    path: str  # relative to the run folder, with "/" separators
    size: int  # bytes
    modified: datetime


@dataclass(frozen=True)
class Listing:
    files: list[Artifact]  # sorted by path, at most LIST_LIMIT
    total_bytes: int  # of every file, listed or not
    file_count: int
    truncated: bool


def run_dir_of(job_id: int) -> Path:
    """The folder that holds job ``job_id``'s checkpoints and rank logs (``Job.run_dir``)."""
    return Path(settings.SYNCLANE_JOBS_DIR) / f"job-{job_id}"


def walk(run_dir: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Yield (relative path, lstat) of every regular file under ``run_dir``; links are skipped."""
    stack = [(run_dir, "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append((Path(entry.path), f"{rel}/"))
            elif stat.S_ISREG(st.st_mode):
                yield rel, st


def list_artifacts(run_dir: Path, *, limit: int = LIST_LIMIT) -> Listing:
    """Every regular file under ``run_dir`` with its size (an empty listing if it is missing)."""
    files: list[Artifact] = []
    total = count = 0
    for rel, st in walk(run_dir):
        total += st.st_size
        count += 1
        files.append(Artifact(rel, st.st_size, datetime.fromtimestamp(st.st_mtime, tz=UTC)))
    files.sort(key=lambda a: a.path)
    return Listing(files[:limit], total, count, truncated=count > limit)


def folder_bytes(run_dir: Path) -> int:
    """Bytes of the regular files under ``run_dir`` (0 when it does not exist)."""
    return sum(st.st_size for _, st in walk(run_dir))


def check_path(rel: str) -> tuple[str, ...]:
    """Return the components of ``rel``; raise ArtifactPathError if it could leave the folder."""
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        raise ArtifactPathError("must be a relative path inside the job's folder")
    parts = PurePosixPath(rel).parts
    if any(part in ("..", ".") for part in parts) or rel.endswith("/"):
        raise ArtifactPathError("must be a relative path inside the job's folder, without . or ..")
    return parts


def open_artifact(run_dir: Path, rel: str) -> tuple[BinaryIO, int]:
    """Open the artifact ``rel`` for reading; return (file, size).

    Raises ArtifactPathError for a path that could leave the folder, FileNotFoundError when
    there is no regular file there or any component of the path is a link.
    """
    parts = check_path(rel)
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        raise FileNotFoundError(rel) from None
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:  # ENOENT, ELOOP (a link), ENOTDIR
        raise FileNotFoundError(rel) from None
    finally:
        os.close(fd)
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode):  # a folder, a fifo, a device
        os.close(file_fd)
        raise FileNotFoundError(rel)
    os.set_blocking(file_fd, True)
    return os.fdopen(file_fd, "rb"), st.st_size


def storage_limit_bytes() -> int | None:
    """The per-tenant storage quota in bytes (None: unlimited)."""
    mb = settings.SYNCLANE_TENANT_STORAGE_MB
    return None if mb <= 0 else mb * 1024 * 1024
