"""Django's SECRET_KEY: per install, never a default that ships with the code.

`make up` writes a random key to ``<run folder>/secret_key`` (mode 0600) on first start;
a deployment sets DJANGO_SECRET_KEY instead. Outside DEBUG, a missing key or one of the
well-known placeholders refuses to start: sessions, CSRF tokens and password-reset links
signed with a public key can be forged by anyone.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

FILE_NAME = "secret_key"
# Used under DEBUG alone, when nothing else is set: a development server on one laptop.
DEBUG_ONLY_KEY = "synclane-debug-only-key-never-use-in-production"
# Keys that are public (this code, its docs, Django's template) and so protect nothing.
PLACEHOLDERS = frozenset(
    {"", DEBUG_ONLY_KEY, "synclane-dev-only-secret-change-me", "change-me-in-production"}
)


def is_placeholder(key: str) -> bool:
    return key.strip() in PLACEHOLDERS or key.startswith("django-insecure-")


def ensure_key_file(run_dir: Path) -> str:
    """The install's key from ``run_dir/secret_key``, written first (0600) if missing."""
    path = run_dir / FILE_NAME
    if not path.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process wrote it first: read theirs
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(50) + "\n")
    os.chmod(path, 0o600)
    return path.read_text().strip()


def resolve(from_env: str, *, run_dir: Path, debug: bool) -> str:
    """The key to use: DJANGO_SECRET_KEY, else the run folder's file, else (DEBUG only) a dev key.

    Raises ImproperlyConfigured outside DEBUG when no real key is found.
    """
    path = run_dir / FILE_NAME
    key = from_env.strip() or (path.read_text().strip() if path.exists() else "")
    if not is_placeholder(key):
        return key
    if debug:
        return DEBUG_ONLY_KEY
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is missing or a published placeholder. Set it to a long random "
        "value (python -c 'import secrets; print(secrets.token_urlsafe(50))'), or run "
        f"`make up`, which writes one to {path}."
    )
