"""Bundle tests store archives in a folder of their own (SYNCLANE_STORAGE_DIR)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def storage_dir(settings, tmp_path):
    settings.SYNCLANE_STORAGE_DIR = tmp_path / "storage"
    return settings.SYNCLANE_STORAGE_DIR


def stored_files(storage_dir) -> list[str]:
    """Every archive in storage (staging leftovers included): must be empty after a refusal."""
    if not storage_dir.exists():
        return []
    return sorted(str(p.relative_to(storage_dir)) for p in storage_dir.rglob("*") if p.is_file())
