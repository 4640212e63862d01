"""Hostile-archive validation and extraction for code bundles (stdlib only, strictly typed).

A bundle is an archive a tenant uploads: untrusted bytes. Nothing here trusts a header:
sizes are counted while decompressing, names are checked before anything is written, and
the archive's kind comes from its first bytes, which must agree with its file name.

``inspect()`` validates without writing; ``extract()`` validates while writing into an
empty folder. Both walk the archive through the same ``_members()`` generator, so the
rules that pass an upload are the rules that guard the worker's unpacking.
Both raise ArchiveError, whose message names the problem (it becomes a 400).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Final, Literal

Kind = Literal["zip", "tar.gz"]
SUFFIXES: Final[dict[str, Kind]] = {".zip": "zip", ".tar.gz": "tar.gz", ".tgz": "tar.gz"}
_ZIP_MAGIC: Final = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or an empty zip
_GZIP_MAGIC: Final = b"\x1f\x8b"
_CHUNK: Final = 64 * 1024
# Below this many uncompressed bytes the ratio is not judged: tiny, very compressible
# files (an empty __init__.py in a 100-byte archive) are not bombs.
_RATIO_FLOOR_BYTES: Final = 1 << 20
# tar headers and padding are not file content, but they are decompressed too: allow them.
_TAR_OVERHEAD_PER_ENTRY: Final = 3 * 512


class ArchiveError(ValueError):
    """The archive is refused; the message says why, for the uploader."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What an archive may hold once uncompressed."""

    max_files: int = 5_000
    max_bytes: int = 200 * 1024 * 1024
    # Uncompressed bytes per archive byte above which the archive counts as a bomb.
    max_ratio: float = 200.0

    def __post_init__(self) -> None:
        if self.max_files < 1 or self.max_bytes < 1 or self.max_ratio <= 1:
            raise ValueError("limits must be positive (max_ratio above 1)")


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a valid archive holds."""

    kind: Kind
    sha256: str  # of the archive's bytes: the bundle's identity
    size: int  # archive bytes
    file_count: int
    total_bytes: int  # uncompressed bytes of its files
    python_files: tuple[str, ...]  # relative paths, for entrypoint checks


def kind_for_name(filename: str) -> Kind:
    """Return the archive kind a file name promises; raise ArchiveError for others."""
    lowered = filename.lower()
    for suffix, kind in SUFFIXES.items():
        if lowered.endswith(suffix):
            return kind
    raise ArchiveError(f"{filename!r} is not a .zip, .tar.gz or .tgz file")


def sniff(path: Path) -> Kind | None:
    """Return the kind the file's first bytes show, or None if neither."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head in _ZIP_MAGIC:
        return "zip"
    if head.startswith(_GZIP_MAGIC):
        return "tar.gz"
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def inspect(path: Path, *, filename: str, limits: Limits) -> Manifest:
    """Validate the archive at ``path`` uploaded as ``filename``; return its manifest.

    Raises ArchiveError naming the first problem found. Writes nothing.
    """
    kind = kind_for_name(filename)
    found = sniff(path)
    if found != kind:
        raise ArchiveError(f"{filename!r} is not a {kind} archive (its content does not match)")
    return _walk(path, kind, limits, sink=None)


def extract(path: Path, dest: Path, *, limits: Limits) -> Manifest:
    """Validate and unpack the archive at ``path`` into the empty folder ``dest``.

    The kind is read from the content. Files are written 0644 and folders 0755 under
    ``dest`` (created 0700 by the caller if it must be private); nothing is written
    outside it. Raises ArchiveError (``dest`` may then hold part of the tree: the caller
    unpacks into a temporary folder and discards it).
    """
    kind = sniff(path)
    if kind is None:
        raise ArchiveError("not a zip or gzip archive")
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise ArchiveError(f"{dest} is not empty")
    return _walk(path, kind, limits, sink=dest)


# --- the walk ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    name: str  # as stored, for messages
    path: PurePosixPath  # normalised, relative
    is_dir: bool
    open: Callable[[], IO[bytes]] | None  # file content; None for folders


class _Budget:
    """Counts what the walk has uncompressed, against the limits and the archive size."""

    def __init__(self, limits: Limits, archive_size: int):
        self.limits = limits
        self.archive_size = max(archive_size, 1)
        self.files = 0
        self.file_bytes = 0

    def count_file(self, name: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise ArchiveError(f"more than {self.limits.max_files} files")

    def count_bytes(self, n: int, *, stream_total: int) -> None:
        """Add ``n`` content bytes; ``stream_total`` is every byte decompressed so far."""
        self.file_bytes += n
        if self.file_bytes > self.limits.max_bytes:
            raise ArchiveError(f"more than {self.limits.max_bytes} bytes uncompressed")
        self.check_ratio(stream_total)

    def check_ratio(self, uncompressed: int) -> None:
        if uncompressed <= _RATIO_FLOOR_BYTES:
            return
        if uncompressed / self.archive_size > self.limits.max_ratio:
            raise ArchiveError(
                f"compression ratio above {self.limits.max_ratio:g}: looks like a compression bomb"
            )


def _walk(path: Path, kind: Kind, limits: Limits, *, sink: Path | None) -> Manifest:
    budget = _Budget(limits, path.stat().st_size)
    files: set[PurePosixPath] = set()
    dirs: set[PurePosixPath] = set()
    python: list[str] = []
    members = _zip_members(path, budget) if kind == "zip" else _tar_members(path, budget)
    try:
        for member in members:
            _check_tree(member, files, dirs)
            if member.is_dir:
                if sink is not None:
                    (sink / member.path).mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            budget.count_file(member.name)
            if member.path.suffix == ".py":
                python.append(str(member.path))
            assert member.open is not None
            _copy(member, budget, sink)
    except (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, gzip.BadGzipFile) as exc:
        raise ArchiveError(f"corrupt {kind} archive ({exc})") from None
    if not files:
        raise ArchiveError("the archive holds no files")
    return Manifest(
        kind=kind,
        sha256=sha256_of(path),
        size=path.stat().st_size,
        file_count=len(files),
        total_bytes=budget.file_bytes,
        python_files=tuple(sorted(python)),
    )


def _copy(member: _Member, budget: _Budget, sink: Path | None) -> None:
    """Stream one file's content, counting it; write it under ``sink`` when given."""
    assert member.open is not None
    target = None
    if sink is not None:
        target_path = sink / member.path
        target_path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        # O_EXCL and O_NOFOLLOW: never through something already there.
        fd = os.open(target_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        target = os.fdopen(fd, "wb")
    try:
        with member.open() as source:
            while chunk := source.read(_CHUNK):
                budget.count_bytes(len(chunk), stream_total=_stream_total(source, budget))
                if target is not None:
                    target.write(chunk)
    finally:
        if target is not None:
            target.close()


def _stream_total(source: IO[bytes], budget: _Budget) -> int:
    # A tar member reads from the shared counting stream; a zip member is counted alone.
    counter = getattr(source, "synclane_counter", None)
    return counter.total if isinstance(counter, _CountingReader) else budget.file_bytes


def _check_tree(member: _Member, files: set[PurePosixPath], dirs: set[PurePosixPath]) -> None:
    """Refuse duplicates, and a file where a folder is (or the reverse)."""
    path = member.path
    for parent in path.parents:
        if parent in files:
            raise ArchiveError(f"{member.name!r} is inside {str(parent)!r}, which is a file")
        if str(parent) != ".":
            dirs.add(parent)
    if member.is_dir:
        if path in files:
            raise ArchiveError(f"{member.name!r} is both a file and a folder")
        dirs.add(path)
        return
    if path in files:
        raise ArchiveError(f"{member.name!r} appears twice")
    if path in dirs:
        raise ArchiveError(f"{member.name!r} is both a file and a folder")
    files.add(path)


def safe_path(name: str) -> PurePosixPath:
    """Return ``name`` as a relative path inside the root; raise ArchiveError if it is not.

    Refused: absolute paths, drive letters, backslashes, ``..`` components, NUL and
    control characters, empty names.
    """
    if not name or any(ord(c) < 32 for c in name):
        raise ArchiveError(f"unsafe path {name!r} (empty or control characters)")
    if "\\" in name:
        raise ArchiveError(f"unsafe path {name!r} (backslash)")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"unsafe path {name!r} (absolute)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"unsafe path {name!r} (escapes the bundle root)")
    if not parts:
        raise ArchiveError(f"unsafe path {name!r} (names the root)")
    return PurePosixPath(*parts)


# --- zip ---------------------------------------------------------------------------------


def _zip_members(path: Path, budget: _Budget) -> Iterator[_Member]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"corrupt zip archive ({exc})") from None
    with archive:
        for info in archive.infolist():
            path_ = safe_path(info.filename)
            mode = info.external_attr >> 16
            if info.flag_bits & 0x1:
                raise ArchiveError(f"{info.filename!r} is encrypted")
            if stat.S_ISLNK(mode):
                raise ArchiveError(f"{info.filename!r} is a link; links are not allowed")
            # Zip writers often store permission bits alone (file type 0): a plain file.
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise ArchiveError(f"{info.filename!r} is a device file or fifo; not allowed")
            if info.is_dir():
                yield _Member(info.filename, path_, True, None)
            else:
                yield _Member(info.filename, path_, False, _zip_opener(archive, info))


def _zip_opener(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    return lambda: archive.open(info)


# --- tar.gz ------------------------------------------------------------------------------


class _CountingReader:
    """A gzip stream that counts every byte it decompresses (headers and padding too)."""

    def __init__(self, raw: IO[bytes], budget: _Budget):
        self.gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self.budget = budget
        self.total = 0

    def read(self, size: int = -1) -> bytes:
        data = self.gz.read(size if size >= 0 else _CHUNK)
        self.total += len(data)
        allowed = self.budget.limits.max_bytes + _TAR_OVERHEAD_PER_ENTRY * (
            self.budget.limits.max_files * 2 + 16
        )
        if self.total > allowed:
            raise ArchiveError(f"more than {self.budget.limits.max_bytes} bytes uncompressed")
        self.budget.check_ratio(self.total)
        return data


class _TarFile:
    """A tar member's content as a closable stream that knows the shared counter."""

    def __init__(self, stream: IO[bytes], counter: _CountingReader):
        self.stream = stream
        self.synclane_counter = counter

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size)

    def __enter__(self) -> _TarFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.stream.close()


def _tar_members(path: Path, budget: _Budget) -> Iterator[_Member]:
    with open(path, "rb") as raw:
        counter = _CountingReader(raw, budget)
        # "r|": a stream, read once in order; members are never seeked or re-read.
        with tarfile.open(fileobj=counter, mode="r|") as archive:  # type: ignore[call-overload]
            for info in archive:
                yield _tar_member(archive, info, counter)


def _tar_member(
    archive: tarfile.TarFile, info: tarfile.TarInfo, counter: _CountingReader
) -> _Member:
    path_ = safe_path(info.name)
    if info.issym() or info.islnk():
        raise ArchiveError(f"{info.name!r} is a link; links are not allowed")
    if info.isdev():
        raise ArchiveError(f"{info.name!r} is a device file or fifo; not allowed")
    if info.isdir():
        return _Member(info.name, path_, True, None)
    if not info.isreg():
        raise ArchiveError(f"{info.name!r} is not a regular file or folder")

    def opener() -> IO[bytes]:
        stream = archive.extractfile(info)
        if stream is None:
            raise ArchiveError(f"{info.name!r} has no content")
        return _TarFile(stream, counter)  # type: ignore[return-value]

    return _Member(info.name, path_, False, opener)
