"""Schema pieces every API view uses: the error responses and their examples (OpenAPI).

The ``Error`` component itself is declared once in ``SPECTACULAR_SETTINGS`` (see
``ERROR_COMPONENT``); views list the error statuses they can answer with ``errors(...)``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse

from controlplane.lib.error_shape import ERROR_COMPONENT  # noqa: F401 - re-exported

ERROR_REF = {"$ref": "#/components/schemas/Error"}

_EXAMPLES: dict[int, tuple[str, dict[str, Any]]] = {
    400: (
        "Bad input",
        {"detail": "Invalid input: world_size.", "world_size": ["must be between 1 and 8"]},
    ),
    401: ("Not authenticated", {"detail": "Authentication credentials were not provided."}),
    403: ("Not allowed", {"detail": "You do not have permission to perform this action."}),
    404: ("Missing, or another tenant's", {"detail": "Not found."}),
    409: ("In use", {"detail": "job 7 is still running: its artifacts are in use"}),
    429: (
        "Too many login attempts",
        {"detail": "Request was throttled. Expected available in 42 seconds."},
    ),
}
_DESCRIPTIONS = {
    400: "Bad input: nothing was written.",
    401: "No or invalid credentials.",
    403: "Authenticated but not allowed.",
    404: "No such object, or it belongs to a tenant you are not in.",
    409: "The object is in a state that does not allow this now.",
    429: "Over a login rate limit, or locked out after failed logins; see Retry-After.",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for these error statuses (401 is always added), with examples."""
    return {code: _error(code) for code in sorted({401, *codes})}


def _error(code: int) -> OpenApiResponse:
    summary, body = _EXAMPLES[code]
    return OpenApiResponse(
        response=ERROR_REF,
        description=_DESCRIPTIONS[code],
        examples=[OpenApiExample(summary, value=body, status_codes=[str(code)])],
    )
