"""A tenant's quota fields and the rules a change to them must follow (no jobs involved)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# Quota fields a site admin may change: name -> (kind, minimum, nullable).
QUOTA_FIELDS: dict[str, tuple[type, float, bool]] = {
    "slot_quota": (int, 0, False),
    "bandwidth_quota_mbps": (int, 0, False),
    "max_running_jobs": (int, 0, False),
    "fair_share_weight": (float, 0.01, False),
    "cohort": (str, 0, False),
    "slot_borrowing_limit": (int, 0, True),
    "slot_lending_limit": (int, 0, True),
    "bandwidth_borrowing_limit_mbps": (int, 0, True),
    "bandwidth_lending_limit_mbps": (int, 0, True),
}
# The largest value any quota field takes: PositiveIntegerField's range on every database.
QUOTA_MAXIMUM = 2_147_483_647
COHORT_MAX_LENGTH = 50
# A cohort name: empty (no cohort) or a slug.
SLUGISH = re.compile(r"[-a-zA-Z0-9_]*")
# What to do when a new quota is below what the tenant uses now.
ON_OVERUSE = ("preempt", "next_admission")


class QuotaError(ValueError):
    """Invalid quota change; ``errors`` maps each bad field to its reasons."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def validated_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes checked field by field; raise QuotaError naming every bad one.

    Types are strict (an int field wants an int, not 2.0, "2" or true; a string field a
    string) and every number must fit its database column: nothing is coerced or cut.
    """
    errors: dict[str, list[str]] = {}
    values: dict[str, Any] = {}
    for name, raw in changes.items():
        reason = _value_error(name, raw)
        if reason:
            errors.setdefault(str(name), []).append(reason)
        else:
            values[name] = raw.strip() if isinstance(raw, str) else raw
    if errors:
        raise QuotaError(errors)
    return values


def _value_error(name: str, raw: Any) -> str:
    """Why ``raw`` cannot be the new value of quota field ``name``, or "" if it can."""
    if name not in QUOTA_FIELDS:
        return "is not a quota field"
    kind, minimum, nullable = QUOTA_FIELDS[name]
    if raw is None:
        return "" if nullable else "is required"
    if kind is str:
        if not isinstance(raw, str):
            return "must be a string"
        if len(raw.strip()) > COHORT_MAX_LENGTH or not SLUGISH.fullmatch(raw.strip()):
            return f"must be at most {COHORT_MAX_LENGTH} letters, digits, - or _"
        return ""
    is_int = isinstance(raw, int) and not isinstance(raw, bool)
    if kind is int and not is_int:
        return "must be a whole number"
    if kind is float and not (is_int or isinstance(raw, float) and math.isfinite(raw)):
        return "must be a number"
    if not minimum <= raw <= QUOTA_MAXIMUM:
        return f"must be between {minimum} and {QUOTA_MAXIMUM}"
    return ""
