"""Checkpoint files in a run folder: names, digests, the newest valid one (stdlib only).

A checkpoint is two files: ``ckpt-<step:08d>.pt`` (the state) and ``ckpt-<step:08d>.pt.sha256``
(its SHA-256 in ``sha256sum`` format, written only once the state is on disk). A checkpoint
counts only when both exist and the digest matches, so a torn, truncated or half-copied state
file is skipped instead of being resumed from. The runtime's ``Checkpointer`` writes and loads
through this module; the supervisor reads the step to resume from with ``latest_valid``, without
importing torch.

The run's user owns the folder, so these files are opened through ``run_files``: only regular
files, never through a link (a FIFO or a link to a control-plane file counts as no checkpoint),
and the supervisor bounds the bytes it hashes (``latest_valid(..., max_bytes=)``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from workers.runtime.protocol import CHECKPOINT_PREFIX
from workers.runtime.run_files import open_regular, read_bounded

DIGEST_SUFFIX = ".sha256"
DIGEST_MAX_BYTES = 4096  # "<64 hex digits>  <name>\n" is under 100
_NAME = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d{{8}})\.pt$")
_CHUNK = 1 << 20


def checkpoint_path(run_dir: Path, step: int) -> Path:
    """Return where the checkpoint of ``step`` lives in ``run_dir``."""
    return run_dir / f"{CHECKPOINT_PREFIX}{step:08d}.pt"


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + DIGEST_SUFFIX)


def file_sha256(path: Path, *, max_bytes: int | None = None) -> str:
    """SHA-256 of the regular file ``path`` as it was when opened (bytes appended later are
    not read). Raises OSError (``run_files.UntrustedFileError`` for a link, a FIFO or any
    other special file, or a file over ``max_bytes``)."""
    digest = hashlib.sha256()
    with open_regular(path, max_bytes=max_bytes) as fh:
        left = os.fstat(fh.fileno()).st_size
        while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def is_valid(path: Path, *, max_bytes: int | None = None) -> bool:
    """Return True when ``path`` exists and matches the digest written after it.

    False also for a state or digest file that is not a regular file (a link, a FIFO), and
    for a state file over ``max_bytes`` (None: any size), which is then not read.
    """
    try:
        recorded = read_bounded(digest_path(path), max_bytes=DIGEST_MAX_BYTES)
        return recorded.decode("ascii").split()[0] == file_sha256(path, max_bytes=max_bytes)
    except (OSError, IndexError, UnicodeDecodeError):
        return False


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Return ``(step, path)`` of every state file named like a checkpoint, newest first.

    Valid or not: temporary files from an interrupted write never match the name.
    """
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), f) for f in run_dir.iterdir() if (m := _NAME.match(f.name))]
    return sorted(found, reverse=True)


def valid_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Return ``(step, path)`` of every valid checkpoint in ``run_dir``, newest first."""
    return [(step, path) for step, path in checkpoints(run_dir) if is_valid(path)]


def latest_valid(run_dir: Path, *, max_bytes: int | None = None) -> tuple[int, Path] | None:
    """Return ``(step, path)`` of the newest valid checkpoint, or None when there is none.

    ``max_bytes`` bounds the bytes hashed in all (None: no bound): a state file larger than
    what is left of it is taken as invalid without being read, so however many and however
    large the files a run leaves, the search reads at most ``max_bytes``.
    """
    left = max_bytes
    for step, path in checkpoints(run_dir):
        try:
            size = path.lstat().st_size
        except OSError:
            continue
        if left is not None and size > left:
            continue
        if is_valid(path, max_bytes=left):
            return step, path
        if left is not None:
            left -= size
    return None


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``write`` so a reader sees the old file or the whole new one.

    Steps: 1. write a temporary file next to it; 2. fsync it; 3. rename it over ``path``;
    4. fsync the folder, so the rename itself survives a crash.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def commit(path: Path) -> None:
    """Record the digest of the state file ``path``: from now on it is a valid checkpoint."""
    line = f"{file_sha256(path)}  {path.name}\n".encode("ascii")
    write_atomically(digest_path(path), lambda fh: fh.write(line))


def prune(run_dir: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest valid checkpoints, and every invalid one older than them.

    A state file newer than the newest valid one is left alone: it may be a write in progress.
    """
    kept = valid_checkpoints(run_dir)[:keep]
    if not kept:
        return
    oldest_kept = kept[-1][0]
    keep_paths = {path for _, path in kept}
    for step, path in checkpoints(run_dir):
        if step <= oldest_kept and path not in keep_paths:
            path.unlink(missing_ok=True)
            digest_path(path).unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
