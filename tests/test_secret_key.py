"""No hard-coded SECRET_KEY: `make up` writes one per install; outside DEBUG a missing or
published key refuses to start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.lib.secret_key import ensure_key_file, is_placeholder

REPO = Path(__file__).resolve().parent.parent


def start_django(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Load the settings in a fresh process (as any server or worker does at start)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        env={
            **clean,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "SYNCLANE_RUN_DIR": str(tmp_path),
            **env,
        },  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_outside_debug_a_missing_key_refuses_to_start(tmp_path):
    result = start_django(tmp_path, DJANGO_DEBUG="0")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is missing or a published placeholder" in result.stderr


@pytest.mark.parametrize(
    "key", ["change-me-in-production", "synclane-dev-only-secret-change-me", "django-insecure-x"]
)
def test_outside_debug_a_published_key_refuses_to_start(tmp_path, key):
    result = start_django(tmp_path, DJANGO_DEBUG="0", DJANGO_SECRET_KEY=key)
    assert result.returncode != 0
    assert "published placeholder" in result.stderr


def test_the_run_folders_key_is_used_when_the_environment_sets_none(tmp_path):
    ensure_key_file(tmp_path)
    result = start_django(tmp_path, DJANGO_DEBUG="0")
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_debug_starts_without_a_key(tmp_path):
    assert start_django(tmp_path, DJANGO_DEBUG="1").returncode == 0


def test_the_install_key_is_random_private_and_stable(tmp_path):
    key = ensure_key_file(tmp_path / "run")
    path = tmp_path / "run" / "secret_key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 50 and not is_placeholder(key)
    assert ensure_key_file(tmp_path / "run") == key
    assert ensure_key_file(tmp_path / "other") != key


def test_the_running_settings_use_no_placeholder():
    from django.conf import settings

    assert not is_placeholder(settings.SECRET_KEY)
