"""Typed environment helpers that fail loudly on malformed values."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit


class EnvError(ValueError):
    """An environment variable is set to a value we cannot use."""


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise EnvError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str, *, base_dir: Path) -> dict[str, object]:
    """Return a Django DATABASES entry for ``sqlite:///path`` or ``postgres://…`` URLs.

    A relative SQLite path is resolved against ``base_dir``.
    """
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        raw_path = unquote(parts.path)
        # sqlite:///relative.db -> "relative.db"; sqlite:////abs.db -> "/abs.db"
        path = Path(raw_path[1:] if raw_path.startswith("/") else raw_path)
        if not path.is_absolute():
            path = base_dir / path
        return sqlite_database(path)
    if parts.scheme in {"postgres", "postgresql"}:
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise EnvError(f"DATABASE_URL {url!r} names no database")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": 0,
        }
    raise EnvError(f"DATABASE_URL scheme {parts.scheme!r} is not supported (sqlite or postgres)")


def sqlite_database(path: Path) -> dict[str, object]:
    # Several processes (ASGI server, Celery children, ingest) write at once: WAL lets
    # readers proceed during a write, IMMEDIATE transactions avoid lock-upgrade deadlocks.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # A file, not memory: the test database is shared with real worker processes.
        "TEST": {"NAME": str(path.with_name("test-" + path.name))},
    }
