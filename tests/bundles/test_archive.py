"""Hostile-archive validation: every refused shape, and that good archives unpack exactly."""

from __future__ import annotations

import gzip
import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from controlplane.bundles.archive import ArchiveError, Limits, extract, inspect
from tests.bundles.archives import (
    TRAIN,
    make_tar_gz,
    make_zip,
    tar_entry,
    tar_gz_with,
    zip_with_mode,
)

LIMITS = Limits()


def refused(path: Path, filename: str | None = None, limits: Limits = LIMITS) -> str:
    with pytest.raises(ArchiveError) as caught:
        inspect(path, filename=filename or path.name, limits=limits)
    return str(caught.value)


@pytest.mark.parametrize("builder,name", [(make_zip, "code.zip"), (make_tar_gz, "code.tar.gz")])
def test_a_good_archive_is_described_by_its_manifest(tmp_path, builder, name):
    path = builder(tmp_path / name, TRAIN)
    manifest = inspect(path, filename=name, limits=LIMITS)
    assert manifest.file_count == 2
    assert manifest.python_files == ("pkg/__init__.py", "train.py")
    assert manifest.total_bytes == len(TRAIN["train.py"])
    assert manifest.size == path.stat().st_size and len(manifest.sha256) == 64


@pytest.mark.parametrize("builder,name", [(make_zip, "code.zip"), (make_tar_gz, "code.tgz")])
def test_extract_writes_exactly_the_archived_tree(tmp_path, builder, name):
    path = builder(tmp_path / name, {**TRAIN, "data/a.txt": b"abc"})
    dest = tmp_path / "out"
    extract(path, dest, limits=LIMITS)
    written = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert written == ["data/a.txt", "pkg/__init__.py", "train.py"]
    assert (dest / "data/a.txt").read_bytes() == b"abc"


def test_extract_refuses_a_folder_that_is_not_empty(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("x")
    with pytest.raises(ArchiveError, match="not empty"):
        extract(make_zip(tmp_path / "c.zip", TRAIN), dest, limits=LIMITS)


@pytest.mark.parametrize(
    "name,reason",
    [
        ("../evil.py", "escapes"),
        ("a/../../evil.py", "escapes"),
        ("/etc/passwd", "absolute"),
        ("C:/evil.py", "absolute"),
        ("a\\..\\evil.py", "backslash"),
        ("bad\x01name.py", "control"),
    ],
)
@pytest.mark.parametrize("builder,suffix", [(make_zip, ".zip"), (make_tar_gz, ".tar.gz")])
def test_paths_escaping_the_root_are_refused(tmp_path, builder, suffix, name, reason):
    path = builder(tmp_path / f"c{suffix}", {"train.py": b"x", name: b"pwned"})
    assert reason in refused(path)


def test_extract_of_a_traversal_writes_nothing_outside(tmp_path):
    path = make_tar_gz(tmp_path / "c.tar.gz", {"../outside.py": b"pwned"})
    with pytest.raises(ArchiveError):
        extract(path, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "outside.py").exists()


@pytest.mark.parametrize(
    "entry,reason",
    [
        (tar_entry("link.py", tarfile.SYMTYPE, linkname="/etc/passwd"), "link"),
        (tar_entry("hard.py", tarfile.LNKTYPE, linkname="train.py"), "link"),
        (tar_entry("dev", tarfile.CHRTYPE), "device"),
        (tar_entry("disk", tarfile.BLKTYPE), "device"),
        (tar_entry("pipe", tarfile.FIFOTYPE), "fifo"),
    ],
)
def test_tar_links_devices_and_fifos_are_refused(tmp_path, entry, reason):
    assert reason in refused(tar_gz_with(tmp_path / "c.tar.gz", entry))


@pytest.mark.parametrize(
    "mode,reason",
    [(stat.S_IFLNK | 0o777, "link"), (stat.S_IFIFO | 0o644, "fifo"), (stat.S_IFCHR, "device")],
)
def test_zip_links_devices_and_fifos_are_refused(tmp_path, mode, reason):
    assert reason in refused(zip_with_mode(tmp_path / "c.zip", "special", mode))


def test_more_files_than_the_limit_are_refused(tmp_path):
    files = {f"f{i}.py": b"" for i in range(11)}
    path = make_zip(tmp_path / "c.zip", files)
    assert "more than 10 files" in refused(path, limits=Limits(max_files=10))
    inspect(path, filename="c.zip", limits=Limits(max_files=11))


@pytest.mark.parametrize("builder,suffix", [(make_zip, ".zip"), (make_tar_gz, ".tar.gz")])
def test_more_bytes_than_the_limit_are_refused(tmp_path, builder, suffix):
    path = builder(tmp_path / f"c{suffix}", {"a.bin": bytes(range(256)) * 40})  # 10,240 bytes
    assert "more than 10000 bytes" in refused(path, limits=Limits(max_bytes=10_000))


def test_a_zip_bomb_is_refused_by_its_ratio(tmp_path):
    path = make_zip(tmp_path / "bomb.zip", {"zeros.bin": bytes(50 * 1024 * 1024)})
    assert path.stat().st_size < 100_000
    assert "compression bomb" in refused(path)


def test_a_tar_gz_bomb_is_refused_by_its_ratio(tmp_path):
    path = make_tar_gz(tmp_path / "bomb.tar.gz", {"zeros.bin": bytes(50 * 1024 * 1024)})
    assert "compression bomb" in refused(path)


def test_a_bomb_hidden_in_tar_metadata_is_caught_by_the_stream_count(tmp_path):
    """A 30 MB pax header is no file content: only counting every decompressed byte sees it."""
    path = tmp_path / "pax.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("train.py")
        info.pax_headers = {"comment": "x" * (30 * 1024 * 1024)}
        archive.addfile(info, io.BytesIO(b""))
    assert "compression bomb" in refused(path)


def test_a_zip_header_that_understates_the_size_does_not_pass(tmp_path):
    path = make_zip(tmp_path / "c.zip", {"train.py": b"x" * 5000})
    raw = bytearray(path.read_bytes())
    # Patch the central directory's uncompressed size of the entry to 10 bytes.
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 24 : central + 28] = (10).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    message = refused(path)
    assert "corrupt" in message or "bytes" in message


@pytest.mark.parametrize(
    "content_builder,name",
    [(make_tar_gz, "code.zip"), (make_zip, "code.tar.gz"), (make_zip, "code.tgz")],
)
def test_an_archive_that_is_not_what_its_name_says_is_refused(tmp_path, content_builder, name):
    path = content_builder(tmp_path / "archive", TRAIN)
    assert "is not a" in refused(path, filename=name)


def test_a_gzip_that_holds_no_tar_is_refused(tmp_path):
    path = tmp_path / "c.tar.gz"
    path.write_bytes(gzip.compress(b"just some text, not a tar archive" * 20))
    assert "corrupt tar.gz" in refused(path)


@pytest.mark.parametrize("name", ["code.rar", "code.tar", "code.gz", "code"])
def test_other_file_names_are_refused(tmp_path, name):
    path = make_zip(tmp_path / "c.zip", TRAIN)
    assert "not a .zip, .tar.gz or .tgz" in refused(path, filename=name)


def test_a_truncated_archive_is_refused(tmp_path):
    path = make_tar_gz(tmp_path / "c.tar.gz", {"a.bin": bytes(range(256)) * 400})
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert "corrupt" in refused(path)


def test_an_encrypted_zip_entry_is_refused(tmp_path):
    path = make_zip(tmp_path / "c.zip", TRAIN)
    raw = bytearray(path.read_bytes())
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 8] |= 0x1  # general purpose flag: encrypted
    path.write_bytes(bytes(raw))
    assert "encrypted" in refused(path)


def test_an_empty_archive_is_refused(tmp_path):
    path = tmp_path / "c.zip"
    with zipfile.ZipFile(path, "w"):
        pass
    assert "no files" in refused(path)


def test_a_name_twice_is_refused(tmp_path):
    path = tmp_path / "c.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for data in (b"one", b"two"):
            info = tarfile.TarInfo("train.py")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    assert "twice" in refused(path)


def test_a_file_used_as_a_folder_is_refused(tmp_path):
    path = make_tar_gz(tmp_path / "c.tar.gz", {"a": b"file", "a/b.py": b"x"})
    assert "which is a file" in refused(path)
