"""Where bundle archives live: one small interface, a local folder behind it.

An object store can be added later as another ``BundleStorage``; callers only use
``put``, ``open``, ``exists`` and ``delete`` with a (tenant id, sha256) key.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Protocol

from django.conf import settings


class BundleStorage(Protocol):
    def put(self, tenant_id: int, sha256: str, source: Path) -> bool:
        """Store ``source`` under the key; return False if it was already there."""

    def open(self, tenant_id: int, sha256: str) -> IO[bytes]:
        """Open the stored archive for reading; raise FileNotFoundError if absent."""

    def exists(self, tenant_id: int, sha256: str) -> bool: ...

    def delete(self, tenant_id: int, sha256: str) -> None:
        """Remove the archive; no error if it is absent."""

    def staging_file(self) -> IO[bytes]:
        """A named temporary file near the store, for an upload being checked."""


class LocalStorage:
    """Archives under ``root/bundles/<tenant id>/<sha256>``, folders 0700, files 0600."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, tenant_id: int, sha256: str) -> Path:
        if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        return self.root / "bundles" / str(int(tenant_id)) / sha256

    def put(self, tenant_id: int, sha256: str, source: Path) -> bool:
        target = self._path(tenant_id, sha256)
        if target.exists():
            return False
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Copy beside the target, then rename: a reader never sees half an archive.
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
            with open(source, "rb") as src:
                shutil.copyfileobj(src, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp.name, 0o600)
        os.replace(tmp.name, target)
        return True

    def open(self, tenant_id: int, sha256: str) -> IO[bytes]:
        return open(self._path(tenant_id, sha256), "rb")

    def exists(self, tenant_id: int, sha256: str) -> bool:
        return self._path(tenant_id, sha256).is_file()

    def delete(self, tenant_id: int, sha256: str) -> None:
        self._path(tenant_id, sha256).unlink(missing_ok=True)

    def staging_file(self) -> IO[bytes]:
        staging = self.root / "staging"
        staging.mkdir(mode=0o700, parents=True, exist_ok=True)
        return tempfile.NamedTemporaryFile(dir=staging, suffix=".upload")


def get_storage() -> BundleStorage:
    """The configured storage (a local folder, SYNCLANE_STORAGE_DIR)."""
    return LocalStorage(Path(settings.SYNCLANE_STORAGE_DIR))
