"""What a user asks to run, validated in one place for the form and the API."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from controlplane.jobs.choices import PriorityClass, SyncStrategy, Workload

# Hyper-parameters a workload accepts: name -> (type, min, max).
HYPERPARAMETERS: dict[str, tuple[type, float, float]] = {
    "lr": (float, 1e-6, 1.0),
    "batch_size": (int, 1, 512),
    "seq_len": (int, 8, 512),
    "checkpoint_every": (int, 1, 1_000_000),
    "eval_every": (int, 1, 1_000_000),
    "seed": (int, 0, 2**31 - 1),
}


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

    @classmethod
    def from_input(cls, data: Mapping[str, Any], *, now: dt.datetime | None = None) -> JobSpec:
        """Parse and validate user input (strings or JSON values); raise SpecError."""
        parser = _Parser(data)
        spec = cls(
            name=parser.text("name", max_length=100),
            workload=parser.choice("workload", Workload.values, default=None),
            world_size=parser.integer("world_size", 1, settings.SYNCLANE_MAX_WORLD_SIZE),
            steps=parser.integer("steps", 1, settings.SYNCLANE_MAX_STEPS),
            sync=parser.choice("sync", SyncStrategy.values, default=SyncStrategy.FULL),
            priority=parser.priority("priority"),
            deadline=parser.deadline("deadline", now or timezone.now()),
            bandwidth_floor_mbps=parser.integer("bandwidth_floor_mbps", 0, 1_000_000, default=0),
            bandwidth_ceiling_mbps=parser.optional_integer("bandwidth_ceiling_mbps", 1, 1_000_000),
            hyperparameters=parser.hyperparameters("hyperparameters"),
        )
        ceiling = spec.bandwidth_ceiling_mbps
        if ceiling is not None and ceiling < spec.bandwidth_floor_mbps:
            parser.fail("bandwidth_ceiling_mbps", "must be at least bandwidth_floor_mbps")
        parser.raise_if_failed()
        return spec


_MISSING = object()


class _Parser:
    """Collects every field's error instead of stopping at the first one."""

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
        return _MISSING if value is None or value == "" else value

    def text(self, name: str, *, max_length: int) -> str:
        raw = self._raw(name)
        if raw is _MISSING or not str(raw).strip():
            self.fail(name, "is required")
            return ""
        value = str(raw).strip()
        if len(value) > max_length:
            self.fail(name, f"must be at most {max_length} characters")
        return value

    def choice(self, name: str, allowed: list[str], *, default: str | None) -> str:
        raw = self._raw(name)
        if raw is _MISSING:
            if default is None:
                self.fail(name, "is required")
                return ""
            return default
        if raw not in allowed:
            self.fail(name, f"must be one of {', '.join(allowed)}")
        return str(raw)

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
        if isinstance(raw, bool) or isinstance(raw, float) and not raw.is_integer():
            self.fail(name, "must be a whole number")
            return low
        try:
            value = int(raw)
        except (TypeError, ValueError):
            self.fail(name, "must be a whole number")
            return low
        if not low <= value <= high:
            self.fail(name, f"must be between {low} and {high}")
        return value

    def priority(self, name: str) -> int:
        raw = self._raw(name)
        if raw is _MISSING:
            return PriorityClass.NORMAL
        found = PriorityClass.from_name(str(raw))
        if found is None:
            names = ", ".join(str(c.label) for c in PriorityClass)
            self.fail(name, f"must be one of {names}")
            return PriorityClass.NORMAL
        return found.value

    def deadline(self, name: str, now: dt.datetime) -> dt.datetime | None:
        raw = self._raw(name)
        if raw is _MISSING:
            return None
        value = raw if isinstance(raw, dt.datetime) else parse_datetime(str(raw))
        if value is None:
            self.fail(name, "must be an ISO 8601 date and time")
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
                self.fail(name, f"unknown hyper-parameter {key!r}")
                continue
            kind, low, high = HYPERPARAMETERS[key]
            try:
                number = kind(value)
            except (TypeError, ValueError):
                self.fail(name, f"{key} must be a {kind.__name__}")
                continue
            if isinstance(value, bool) or not low <= number <= high:
                self.fail(name, f"{key} must be between {low} and {high}")
                continue
            result[key] = number
        return result
