"""The ``Error`` schema component, as plain data (settings import it, so no imports here)."""

from __future__ import annotations

from typing import Any

ERROR_COMPONENT: dict[str, Any] = {
    "type": "object",
    "description": "Every error body: a one-line `detail`; for bad input (400) also one key "
    "per field (dotted for nested fields) with the list of its reasons.",
    "required": ["detail"],
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}
