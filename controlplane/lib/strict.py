"""Strict type checks for user input: JSON's 2.0, "2" or true is never taken for 2."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any


def is_whole_number(value: object) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real_number(value: object) -> bool:
    """True for a finite int or float that is not a bool."""
    if isinstance(value, float):
        return math.isfinite(value)
    return is_whole_number(value)


def unknown_fields(data: Mapping[str, Any], known: Collection[str]) -> dict[str, list[str]]:
    """An error for each key of ``data`` that is not in ``known`` (nothing is ignored silently)."""
    return {str(key): ["is not a known field"] for key in data if key not in known}
