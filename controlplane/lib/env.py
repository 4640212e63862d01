"""Typed environment helpers that fail loudly on malformed values.

Every name read through them is remembered (``names_read``): that is the control plane's
list of environment variables, which a test checks ``.env.example`` against.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit


class EnvError(ValueError):
    """An environment variable is set to a value we cannot use."""


_NAMES_READ: set[str] = set()


def names_read() -> frozenset[str]:
    """Every variable name these helpers were asked for in this process so far."""
    return frozenset(_NAMES_READ)


def _raw(name: str) -> str | None:
    _NAMES_READ.add(name)
    return os.environ.get(name)


def env_str(name: str, default: str) -> str:
    raw = _raw(name)
    return default if raw is None else raw


def env_bool(name: str, default: bool) -> bool:
    raw = _raw(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise EnvError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int) -> int:
    raw = _raw(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = _raw(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = _raw(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# A DNS label-ish name: what a host name, a Celery queue suffix and a URL path segment all take.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_LABEL_KEY_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?")


def env_name(name: str, default: str) -> str:
    """A name of letters, digits, ``.``, ``_`` and ``-`` (at most 200, starting alphanumeric)."""
    raw = _raw(name)
    if raw is None or raw.strip() == "":
        return default
    if not NAME_RE.fullmatch(raw.strip()):
        raise EnvError(
            f"{name}={raw!r} is not a name (letters, digits, '.', '_', '-'; "
            "starting with a letter or digit; at most 200)"
        )
    return raw.strip()


def label_problem(key: object, value: object) -> str | None:
    """Why ``key=value`` is not a label (Kubernetes-like syntax), or None if it is one."""
    if not isinstance(key, str) or not _LABEL_KEY_RE.fullmatch(key):
        return f"label key {key!r} must be 1-63 letters, digits, '.', '_', '-', '/'"
    if not isinstance(value, str) or not _LABEL_VALUE_RE.fullmatch(value):
        return f"label {key}: value {value!r} must be at most 63 letters, digits, '.', '_', '-'"
    return None


def env_labels(name: str, default: dict[str, str]) -> dict[str, str]:
    """Labels written ``key=value,key=value`` (e.g. ``gpu=h200,zone=a``)."""
    raw = _raw(name)
    if raw is None or raw.strip() == "":
        return dict(default)
    labels: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise EnvError(f"{name}={raw!r}: {item!r} is not key=value (like gpu=h200,zone=a)")
        if (problem := label_problem(key, value)) is not None:
            raise EnvError(f"{name}={raw!r}: {problem}")
        if key in labels:
            raise EnvError(f"{name}={raw!r}: label {key!r} is given twice")
        labels[key] = value
    return labels


def env_rate(name: str, default: str) -> str:
    """A rate as DRF's throttles read it ("30/minute": a count, then s, m, h or d...)."""
    raw = _raw(name)
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"[0-9]+/(s|sec|second|m|min|minute|h|hour|d|day)", raw.strip()):
        raise EnvError(f"{name}={raw!r} is not a rate (like 30/minute, 5/second, 100/hour)")
    return raw.strip()


def database_from_url(url: str, *, base_dir: Path, pool_max: int = 0) -> dict[str, object]:
    """Return a Django DATABASES entry for ``sqlite:///path`` or ``postgres://…`` URLs.

    A relative SQLite path is resolved against ``base_dir``. ``pool_max`` > 0: PostgreSQL
    connections come from a pool of at most that many per process (psycopg_pool), kept
    between requests and tasks; 0: a new connection for each.
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
            # With a pool, a closed connection goes back to it; Django wants 0 here then.
            "CONN_MAX_AGE": 0,
            "OPTIONS": {"pool": postgres_pool(pool_max)} if pool_max > 0 else {},
        }
    raise EnvError(f"DATABASE_URL scheme {parts.scheme!r} is not supported (sqlite or postgres)")


def postgres_pool(max_size: int) -> dict[str, object]:
    """psycopg_pool options: opened on demand and shrunk back to nothing after a minute idle,
    so a process that is quiet (a Celery pool process between tasks) holds no connection of
    the server's limited number for long."""
    return {"min_size": 0, "max_size": max_size, "max_idle": 60.0, "timeout": 30.0}


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
