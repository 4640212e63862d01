"""`manage.py check --deploy` is clean with the production variables the deploy files document
(deploy/synclane.env.example; .env.example describes each)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The production environment file shipped with the systemd units.
DEPLOY_ENV = REPO / "deploy" / "synclane.env.example"


def production_variables() -> dict[str, str]:
    """The Django variables of deploy/synclane.env.example, with a real key filled in."""
    found = re.findall(r"^(DJANGO_[A-Z_]+)=(.*)$", DEPLOY_ENV.read_text(), flags=re.MULTILINE)
    return {**dict(found), "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)}


PRODUCTION = production_variables()


def check_deploy(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={**base, "SYNCLANE_RUN_DIR": str(tmp_path), **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_production_variables(tmp_path):
    result = check_deploy(tmp_path, PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_warns_without_them(tmp_path):
    result = check_deploy(tmp_path, {"DJANGO_SECRET_KEY": PRODUCTION["DJANGO_SECRET_KEY"]})
    assert result.returncode != 0
    assert {"security.W004", "security.W008", "security.W012", "security.W016"} <= set(
        re.findall(r"security\.W\d+", result.stdout + result.stderr)
    )


def test_env_example_documents_every_production_variable():
    documented = (REPO / ".env.example").read_text()
    assert all(f"\n{name}=" in documented for name in PRODUCTION)
