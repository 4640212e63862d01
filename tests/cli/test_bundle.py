"""Packing a folder for ``synclane submit --code``: .synclaneignore, links, reproducibility."""

from __future__ import annotations

import io
import tarfile

from controlplane.cli.bundle import files_to_pack, pack


def make_project(root):
    (root / "pkg").mkdir()
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 100)
    (root / "notes.log").write_text("x")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / ".synclaneignore").write_text("data/\n*.log\n")
    (root / "link.py").symlink_to(root / "train.py")


def test_ignored_files_links_and_vcs_folders_are_left_out(tmp_path):
    make_project(tmp_path)
    assert files_to_pack(tmp_path) == [".synclaneignore", "pkg/model.py", "train.py"]


def test_the_archive_holds_the_kept_files_and_is_the_same_bytes_twice(tmp_path):
    make_project(tmp_path)
    first, names = pack(tmp_path)
    again, _ = pack(tmp_path)
    assert first == again
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as archive:
        assert archive.getnames() == names
        assert archive.extractfile("train.py").read() == b"print('hi')\n"
