"""What a user asks to run, validated in one place for the form and the API."""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from controlplane.jobs.choices import PriorityClass, SyncStrategy, Workload
from controlplane.lib.env import label_problem
from controlplane.lib.strict import is_real_number, is_whole_number, unknown_fields

# Hyper-parameters a workload accepts: name -> (type, min, max).
HYPERPARAMETERS: dict[str, tuple[type, float, float]] = {
    "lr": (float, 1e-6, 1.0),
    "batch_size": (int, 1, 512),
    "seq_len": (int, 8, 512),
    "checkpoint_every": (int, 1, 1_000_000),
    "eval_every": (int, 1, 1_000_000),
    "seed": (int, 0, 2**31 - 1),
}


# Highest max_restarts a job may ask for: each restart re-runs steps since a checkpoint.
MAX_RESTARTS_LIMIT = 20

# --- tenant code: entrypoint and environment rules ---------------------------------------

_HEX = re.compile(r"[0-9a-f]{8,64}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ARGS = 64
MAX_ARG_LENGTH = 1000
MAX_ENV_VARS = 64
MAX_ENV_VALUE = 4096
MAX_SELECTOR_LABELS = 16

# A job's env may not set these: ours (the runtime's protocol, Django, Celery), torch's
# and torchrun's, the loader's and the interpreter's. Checked upper-cased.
FORBIDDEN_ENV_PREFIXES = (
    "SYNCLANE_", "TORCH", "MASTER_", "RANK", "WORLD_", "LOCAL_RANK", "LOCAL_WORLD_",
    "GROUP_", "ROLE_", "LD_", "PYTHON", "DJANGO_", "CELERY_", "GLOO_", "NCCL_SOCKET",
)  # fmt: skip
# Exact names: every other setting the control plane reads (see .env.example), and the
# process basics the supervisor sets itself.
FORBIDDEN_ENV_NAMES = frozenset(
    {"DATABASE_URL", "REDIS_URL", "PORT", "PATH", "HOME", "USER", "LOGNAME", "SHELL",
     "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TMPDIR"}
)  # fmt: skip


def env_name_problem(name: object) -> str | None:
    """Why ``name`` may not be set by a job's env, or None if it may."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        return f"{name!r} is not a valid variable name"
    upper = name.upper()
    if upper in FORBIDDEN_ENV_NAMES or upper.startswith(FORBIDDEN_ENV_PREFIXES):
        return f"{name} is reserved and cannot be set"
    return None


def entrypoint_problems(argv: list[str]) -> list[str]:
    """Why ``argv`` is not a runnable entrypoint (empty list: it is).

    The first word is a script inside the bundle (a relative .py path) or ``-m module``.
    """
    if not argv:
        return ["must name a script or -m module"]
    if len(argv) > MAX_ARGS:
        return [f"at most {MAX_ARGS} arguments"]
    if any(len(a) > MAX_ARG_LENGTH or "\0" in a for a in argv):
        return [f"each argument must be at most {MAX_ARG_LENGTH} characters, no NUL"]
    if argv[0] == "-m":
        if len(argv) < 2 or not _MODULE.fullmatch(argv[1]):
            return ["-m must be followed by a module name (like train or pkg.train)"]
        return []
    script = argv[0]
    if script.startswith("-"):
        return [f"{script!r}: only -m is accepted before the program"]
    parts = script.split("/")
    if script.startswith("/") or ".." in parts or "\\" in script or not script.endswith(".py"):
        return [f"{script!r} must be a relative path to a .py file inside the bundle"]
    return []


class SpecError(ValueError):
    """Invalid input; ``errors`` maps each bad field to its reasons."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    name: str
    workload: str
    world_size: int
    steps: int
    sync: str = SyncStrategy.FULL
    priority: int = PriorityClass.NORMAL
    deadline: dt.datetime | None = None
    bandwidth_floor_mbps: int = 0
    bandwidth_ceiling_mbps: int | None = None
    hyperparameters: dict[str, float | int] = field(default_factory=dict)
    # Restarts after failed attempts before the job fails; None: the platform's default.
    max_restarts: int | None = None
    # Tenant code instead of a built-in workload: a bundle (id or sha256), the argv run
    # in its unpacked folder (a script path or "-m module", then arguments), extra env.
    code: str = ""
    entrypoint: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # Labels every node of the job's ranks must carry ({"gpu": "h200"}); {}: any node.
    node_selector: dict[str, str] = field(default_factory=dict)

    @property
    def runs_code(self) -> bool:
        return bool(self.code)

    @classmethod
    def from_input(
        cls,
        data: Mapping[str, Any],
        *,
        now: dt.datetime | None = None,
        also_known: Collection[str] = (),
    ) -> JobSpec:
        """Parse and validate user input (JSON values or a form's cleaned data).

        Raises SpecError naming every bad field. A key that is neither a field of the
        spec nor in ``also_known`` (what the caller reads itself, e.g. ``tenant``) is an
        error, not ignored: a misspelt optional field must not silently fall back.
        """
        parser = _Parser(data)
        known = {f.name for f in fields(cls)} | set(also_known)
        parser.errors.update(unknown_fields(data, known))
        spec = cls(
            name=parser.text("name", max_length=100),
            workload=parser.choice("workload", Workload.values, default=""),
            world_size=parser.integer("world_size", 1, settings.SYNCLANE_MAX_WORLD_SIZE),
            steps=parser.integer("steps", 1, settings.SYNCLANE_MAX_STEPS),
            sync=parser.choice("sync", SyncStrategy.values, default=SyncStrategy.FULL),
            priority=parser.priority("priority"),
            deadline=parser.deadline("deadline", now or timezone.now()),
            bandwidth_floor_mbps=parser.integer("bandwidth_floor_mbps", 0, 1_000_000, default=0),
            bandwidth_ceiling_mbps=parser.optional_integer("bandwidth_ceiling_mbps", 1, 1_000_000),
            hyperparameters=parser.hyperparameters("hyperparameters"),
            max_restarts=parser.optional_integer("max_restarts", 0, MAX_RESTARTS_LIMIT),
            code=parser.code_ref("code"),
            entrypoint=parser.entrypoint("entrypoint"),
            env=parser.env("env"),
            node_selector=parser.labels("node_selector"),
        )
        parser.workload_or_code(spec.workload, spec.code, spec.entrypoint)
        ceiling = spec.bandwidth_ceiling_mbps
        if ceiling is not None and ceiling < spec.bandwidth_floor_mbps:
            parser.fail("bandwidth_ceiling_mbps", "must be at least bandwidth_floor_mbps")
        parser.raise_if_failed()
        return spec


_MISSING = object()
# Control characters (NUL among them) are refused in text: PostgreSQL cannot store NUL, and
# none of them belongs in a name.
_CONTROL = frozenset(chr(c) for c in range(32)) | {"\x7f"}


class _Parser:
    """Collects every field's error instead of stopping at the first one.

    Values are taken as JSON gives them (the API) or as a Django form cleans them (the
    page): an integer field wants an int, a text field a str, and nothing is coerced.
    """

    def __init__(self, data: Mapping[str, Any]):
        self.data = data
        self.errors: dict[str, list[str]] = {}

    def fail(self, name: str, reason: str) -> None:
        self.errors.setdefault(name, []).append(reason)

    def raise_if_failed(self) -> None:
        if self.errors:
            raise SpecError(self.errors)

    def _raw(self, name: str) -> Any:
        value = self.data.get(name, _MISSING)
        return _MISSING if value is None else value

    def text(self, name: str, *, max_length: int) -> str:
        raw = self._raw(name)
        if raw is not _MISSING and not isinstance(raw, str):
            self.fail(name, "must be a string")
            return ""
        if not isinstance(raw, str) or not raw.strip():
            self.fail(name, "is required")
            return ""
        value = raw.strip()
        if len(value) > max_length:
            self.fail(name, f"must be at most {max_length} characters")
        elif not _CONTROL.isdisjoint(value):
            self.fail(name, "must not contain control characters")
        return value

    def workload_or_code(self, workload: str, code: str, entrypoint: tuple[str, ...]) -> None:
        """A job runs a built-in workload or a bundle's entrypoint: exactly one of them."""
        if workload and code:
            self.fail("code", "give either workload or code, not both")
        elif not workload and not code and "workload" not in self.errors:
            self.fail("workload", "is required (or give code and entrypoint)")
        if code and not entrypoint and "entrypoint" not in self.errors:
            self.fail("entrypoint", "is required with code")
        if entrypoint and not code:
            self.fail("entrypoint", "needs code (a bundle) to run in")

    def code_ref(self, name: str) -> str:
        raw = self._raw(name)
        if raw is _MISSING or raw == "":  # a form's empty field: no code
            return ""
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            self.fail(name, "must be a bundle id or sha256")
            return ""
        value = str(raw).strip().lower()
        if not (value.isdigit() or _HEX.fullmatch(value)):
            self.fail(name, "must be a bundle id or sha256 (at least 8 hex digits)")
            return ""
        return value

    def entrypoint(self, name: str) -> tuple[str, ...]:
        raw = self._raw(name)
        if raw is _MISSING or raw == "":
            return ()
        if isinstance(raw, str):
            try:
                argv = shlex.split(raw)
            except ValueError as exc:
                self.fail(name, f"cannot be split into arguments ({exc})")
                return ()
        elif isinstance(raw, list | tuple) and all(isinstance(a, str) for a in raw):
            argv = list(raw)
        else:
            self.fail(name, "must be a list of strings or a command line")
            return ()
        for reason in entrypoint_problems(argv):
            self.fail(name, reason)
        return tuple(argv)

    def env(self, name: str) -> dict[str, str]:
        raw = self._raw(name)
        if raw is _MISSING or raw == {}:
            return {}
        if not isinstance(raw, Mapping):
            self.fail(name, "must be an object of NAME: value strings")
            return {}
        if len(raw) > MAX_ENV_VARS:
            self.fail(name, f"at most {MAX_ENV_VARS} variables")
            return {}
        result: dict[str, str] = {}
        for key, value in raw.items():
            problem = env_name_problem(key)
            if problem is None and not isinstance(value, str):
                problem = f"{key}: the value must be a string"
            elif problem is None and ("\0" in value or len(value) > MAX_ENV_VALUE):
                problem = f"{key}: the value must be at most {MAX_ENV_VALUE} characters, no NUL"
            if problem is not None:
                self.fail(name, problem)
                continue
            result[key] = value
        return result

    def labels(self, name: str) -> dict[str, str]:
        raw = self._raw(name)
        if raw is _MISSING or raw is None or raw == {}:
            return {}
        if not isinstance(raw, Mapping):
            self.fail(name, 'must be an object of label: value strings, e.g. {"gpu": "h200"}')
            return {}
        if len(raw) > MAX_SELECTOR_LABELS:
            self.fail(name, f"at most {MAX_SELECTOR_LABELS} labels")
            return {}
        result: dict[str, str] = {}
        for key, value in raw.items():
            problem = label_problem(key, value)
            if problem is not None:
                self.fail(name, problem)
                continue
            result[key] = value
        return result

    def choice(self, name: str, allowed: list[str], *, default: str | None) -> str:
        raw = self._raw(name)
        if raw is _MISSING:
            if default is None:
                self.fail(name, "is required")
                return ""
            return default
        if not isinstance(raw, str) or raw not in allowed:
            self.fail(name, f"must be one of {', '.join(allowed)}")
            return default or ""
        return raw

    def integer(self, name: str, low: int, high: int, *, default: int | None = None) -> int:
        raw = self._raw(name)
        if raw is _MISSING:
            if default is None:
                self.fail(name, "is required")
                return low
            return default
        return self._bounded_int(name, raw, low, high)

    def optional_integer(self, name: str, low: int, high: int) -> int | None:
        raw = self._raw(name)
        return None if raw is _MISSING else self._bounded_int(name, raw, low, high)

    def _bounded_int(self, name: str, raw: Any, low: int, high: int) -> int:
        if not is_whole_number(raw):
            self.fail(name, "must be a whole number")
            return low
        if not low <= raw <= high:
            self.fail(name, f"must be between {low} and {high}")
            return low
        return int(raw)

    def priority(self, name: str) -> int:
        raw = self._raw(name)
        if raw is _MISSING:
            return PriorityClass.NORMAL
        found = PriorityClass.from_name(raw) if isinstance(raw, str) else None
        if found is None:
            names = ", ".join(str(c.label) for c in PriorityClass)
            self.fail(name, f"must be one of {names}")
            return PriorityClass.NORMAL
        return found.value

    def deadline(self, name: str, now: dt.datetime) -> dt.datetime | None:
        raw = self._raw(name)
        if raw is _MISSING:
            return None
        value = raw if isinstance(raw, dt.datetime) else _parse_datetime(raw)
        if value is None:
            self.fail(name, "must be an ISO 8601 date and time that exists")
            return None
        if timezone.is_naive(value):
            value = timezone.make_aware(value, dt.UTC)
        if value <= now:
            self.fail(name, "must be in the future")
        return value

    def hyperparameters(self, name: str) -> dict[str, float | int]:
        raw = self._raw(name)
        if raw is _MISSING:
            return {}
        if not isinstance(raw, Mapping):
            self.fail(name, "must be an object")
            return {}
        result: dict[str, float | int] = {}
        for key, value in raw.items():
            if key not in HYPERPARAMETERS:
                self.fail(name, f"unknown hyper-parameter {str(key)[:50]!r}")
                continue
            kind, low, high = HYPERPARAMETERS[key]
            fits = is_whole_number(value) if kind is int else is_real_number(value)
            if not fits:
                self.fail(name, f"{key} must be a {'whole number' if kind is int else 'number'}")
            elif not low <= value <= high:
                self.fail(name, f"{key} must be between {low} and {high}")
            else:
                result[key] = kind(value)
        return result


def _parse_datetime(raw: object) -> dt.datetime | None:
    """An ISO 8601 string as an aware or naive datetime; None if it is not one or cannot exist.

    Django's parser raises ValueError for a well-formed date that does not exist
    (2026-02-30) and returns None for a malformed one: both are the same error here.
    """
    if not isinstance(raw, str):
        return None
    try:
        return parse_datetime(raw)
    except (ValueError, OverflowError):
        return None
