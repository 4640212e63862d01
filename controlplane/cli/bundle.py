"""Pack a folder into a code bundle for ``synclane submit --code DIR``.

Files matching ``.synclaneignore`` in that folder (gitignore syntax, read by pathspec) are
left out, as are version-control folders, virtual environments and bytecode. Links are
left out too: the server refuses archives that hold them. The archive is reproducible
(sorted names, zero times and owners), so packing unchanged code again gives the same
bytes, and the server recognises a bundle it already has (sha256) instead of storing it twice.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pathspec

IGNORE_FILE = ".synclaneignore"
ALWAYS_IGNORED = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/")


def ignore_spec(root: Path) -> pathspec.GitIgnoreSpec:
    """The patterns that leave files out: ours, then the folder's ``.synclaneignore``."""
    lines = list(ALWAYS_IGNORED)
    ignore_file = root / IGNORE_FILE
    if ignore_file.is_file():
        lines += ignore_file.read_text().splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def files_to_pack(root: Path) -> list[str]:
    """Relative paths (POSIX) of the regular files to pack, sorted."""
    spec = ignore_spec(root)
    kept: list[str] = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink() or not path.is_file():
            continue
        if spec.match_file(relative):
            continue
        kept.append(relative)
    return kept


def pack(root: Path) -> tuple[bytes, list[str]]:
    """A reproducible .tar.gz of ``root``'s kept files; return it and the packed names."""
    names = files_to_pack(root)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in names:
            data = (root / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0), names
