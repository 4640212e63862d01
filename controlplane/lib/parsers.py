"""Request-body parsing for the API: JSON only, bounded in depth.

DRF's own JSON parser turns bad JSON (and NaN/Infinity) into a 400, but a body nested a
few thousand levels deep makes ``json`` raise RecursionError, which would be a 500. And
form-encoded bodies would bring every number as a string; the API takes JSON alone, so
that a field's type is what the client sent.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

# Deeper than any field of ours needs (a spec's hyperparameters are two levels).
MAX_DEPTH = 16


def depth_of(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


class BoundedJSONParser(JSONParser):
    """JSON whose nesting is at most MAX_DEPTH; otherwise a 400 that names the body."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise _too_deep() from None
        except ParseError as exc:
            # Keyed like every other 400: the field at fault is the body itself.
            raise ValidationError({"body": [str(exc.detail)]}) from None
        if depth_of(data) > MAX_DEPTH:
            raise _too_deep()
        return data


def _too_deep() -> ValidationError:
    return ValidationError({"body": [f"nests deeper than {MAX_DEPTH} levels"]})


def body_object(data: Any) -> dict[str, Any]:
    """The request body as a JSON object; a list, string or number is a 400 naming the body."""
    if not isinstance(data, dict):
        raise ValidationError({"body": ["must be a JSON object"]})
    return data
