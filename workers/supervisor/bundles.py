"""A node's copy of a job's code: download once per node, verify, unpack once, copy per run.

Cache layout: ``CACHE/<sha256>/`` is an unpacked bundle, made atomically (unpacked in a
temporary folder beside it, then renamed), so a half-unpacked tree is never used and two
launches of the same bundle at once both end up with one complete copy. A run gets its
own copy under its run folder: a script that writes next to itself changes nothing else.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from controlplane.bundles import archive

_CHUNK = 64 * 1024


class BundleFetchError(RuntimeError):
    """The bundle could not be downloaded, or its bytes are not the ones asked for.

    ``platform_fault`` is True when the control plane could not be reached or failed
    (connection error, 5xx, a local write): the job is not at fault and goes back to the
    queue. False for a refusal (4xx) or bad bytes, which are the job's own problem.
    """

    def __init__(self, message: str, *, platform_fault: bool = False) -> None:
        super().__init__(message)
        self.platform_fault = platform_fault


def download(*, url: str, token: str, sha256: str, dest: Path, max_bytes: int) -> None:
    """Stream ``url`` into ``dest``, checking the sha256; raise BundleFetchError on any failure."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bundle {token}"})
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(request, timeout=30) as response, open(dest, "wb") as out:
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise BundleFetchError(f"bundle {sha256[:12]} is larger than {max_bytes} bytes")
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise BundleFetchError(
            f"bundle {sha256[:12]}: the control plane said {exc.code}",
            platform_fault=exc.code >= 500,
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise BundleFetchError(
            f"bundle {sha256[:12]}: download failed ({exc})", platform_fault=True
        ) from None
    if digest.hexdigest() != sha256:
        raise BundleFetchError(f"bundle {sha256[:12]}: downloaded bytes have another sha256")


def ensure_unpacked(
    *, sha256: str, cache_dir: Path, url: str, token: str, limits: archive.Limits
) -> Path:
    """Return the node's unpacked copy of the bundle, downloading it if absent.

    Steps: 1. a cached tree is used as is; 2. download and verify into a temporary
    folder; 3. unpack there (validated again: the same rules as the upload); 4. rename.
    """
    target = cache_dir / sha256
    if target.is_dir():
        return target
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=cache_dir, prefix=".incoming-"))
    try:
        archive_path = work / "archive"
        max_bytes = limits.max_bytes + 16 * 1024 * 1024
        download(url=url, token=token, sha256=sha256, dest=archive_path, max_bytes=max_bytes)
        tree = work / "tree"
        try:
            archive.extract(archive_path, tree, limits=limits)
        except archive.ArchiveError as exc:
            raise BundleFetchError(f"bundle {sha256[:12]}: {exc}") from None
        try:
            os.rename(tree, target)
        except OSError:
            if not target.is_dir():  # not "someone else was faster": a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def copy_for_run(source: Path, run_dir: Path, *, folder: str = "code") -> Path:
    """Replace ``run_dir/<folder>`` with a fresh copy of ``source``; return it."""
    code = run_dir / folder
    shutil.rmtree(code, ignore_errors=True)
    shutil.copytree(source, code, symlinks=False)
    return code
