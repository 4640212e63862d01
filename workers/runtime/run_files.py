"""Open files of a run folder as someone who does not trust them (stdlib only).

A run folder belongs to the run's user: whatever is there may have been put there by
tenant code. The supervisor reads some of it (checkpoints to resume from, the exit file,
torchrun's log), so it opens such a file only when it is a regular file reached without
following a link, and reads no more than a bound:

* ``O_NOFOLLOW``: a link to a control-plane file (the database, the secret key) is refused,
  so its bytes never reach a digest check or a failure reason the tenant can read;
* ``O_NONBLOCK`` on open, then ``fstat`` on the descriptor: a FIFO (which would block the
  open, or the read, until a writer came) or a device is refused before any read;
* a size cap, checked on the open descriptor: a huge or sparse file cannot stall a hash.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


class UntrustedFileError(OSError):
    """The file is not one to read: not regular, a link, or over its size cap."""


def open_regular(path: os.PathLike[str] | str, *, max_bytes: int | None = None) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file of at most ``max_bytes`` (None: any).

    Returns a binary file object (blocking reads). Raises UntrustedFileError for a link,
    a FIFO, a socket, a device, a folder or a file over the cap; OSError if it is missing.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise UntrustedFileError(f"{path}: a link, not followed") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{path}: not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise UntrustedFileError(f"{path}: {info.st_size} bytes, over the cap of {max_bytes}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: os.PathLike[str] | str, *, max_bytes: int) -> bytes:
    """The whole of the regular file ``path`` if it has at most ``max_bytes``.

    Raises UntrustedFileError or OSError as ``open_regular`` does; reads at most
    ``max_bytes`` even if the file grows meanwhile.
    """
    with open_regular(path, max_bytes=max_bytes) as fh:
        return fh.read(max_bytes)


def tail_bounded(path: os.PathLike[str] | str, *, since: int, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` from offset ``since``, at most its last ``max_bytes``.

    For a log that may have grown large: reads no more than ``max_bytes``. Raises as
    ``open_regular`` does (no size cap on the file itself).
    """
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(since, size - max_bytes, 0))
        return fh.read(max_bytes)
