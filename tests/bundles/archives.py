"""Builders of good and hostile archives for the bundle tests (stdlib only)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path


def make_zip(path: Path, files: Mapping[str, bytes], *, compress: bool = True) -> Path:
    """A zip of ``files`` whose bytes depend on nothing else: each entry carries a fixed date
    (``writestr`` with a bare name stamps the current time, so two zips of the same files
    made in different seconds would differ)."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = method  # a ZipInfo does not take the archive's default
            archive.writestr(info, data)
    return path


def make_tar_gz(path: Path, files: Mapping[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            add_tar_file(archive, name, data)
    return path


def add_tar_file(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(data))


def tar_gz_with(path: Path, *infos: tarfile.TarInfo) -> Path:
    """A .tar.gz holding one good file plus the given special entries (no content)."""
    with tarfile.open(path, "w:gz") as archive:
        add_tar_file(archive, "train.py", b"print('hi')\n")
        for info in infos:
            archive.addfile(info)
    return path


def tar_entry(name: str, kind: bytes, *, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def zip_with_mode(path: Path, name: str, mode: int, data: bytes = b"x") -> Path:
    """A zip whose entry ``name`` claims the Unix file mode ``mode`` (links, fifos, ...)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("train.py", b"print('hi')\n")
        info = zipfile.ZipInfo(name)
        info.external_attr = mode << 16
        archive.writestr(info, data)
    return path


TRAIN = {"train.py": b"import sys\nprint('training', sys.argv[1:])\n", "pkg/__init__.py": b""}
