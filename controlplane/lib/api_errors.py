"""The one error body of the API: ``{"detail": message, "<field>": [reason, ...]}``.

Every error (400, 401, 403, 404, 405, 409, 429, ...) carries a one-line ``detail``; bad
input (400) also names each field with its reasons, so a client can print ``detail`` and
then the fields. Views report bad input by raising ``ValidationError({field: [reasons]})``;
a service refusing an action the object's state does not allow now raises a ``Conflict``
(``lib.conflict``), answered here with a 409.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.lib.conflict import Conflict


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with its body reshaped by ``error_body`` (None: not an API error).

    A ``Conflict`` from a service is a 409 with its message as ``detail``.
    """
    if isinstance(exc, Conflict):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    response = drf_exception_handler(exc, context)
    if response is not None:
        response.data = error_body(response.data)
    return response


def error_body(data: Any) -> dict[str, Any]:
    """Reshape DRF's error data into ``{"detail": str, field: [str, ...]}``."""
    if isinstance(data, dict) and set(data) == {"detail"}:
        return {"detail": str(data["detail"])}
    fields = _flatten(data if isinstance(data, dict) else {"non_field_errors": data})
    names = ", ".join(fields)
    return {"detail": f"Invalid input: {names}." if names else "Invalid input.", **fields}


def _flatten(errors: dict[str, Any], prefix: str = "") -> dict[str, list[str]]:
    """Nested field errors become dotted names (``hyperparameters.lr``); reasons are strings."""
    flat: dict[str, list[str]] = {}
    for key, value in errors.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, prefix=f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = [str(v) for v in value]
        else:
            flat[name] = [str(value)]
    return flat


API_PREFIX = "/api/"


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 for a URL no route matches: the API's error body under /api/, else Django's page.

    DRF answers the 404s of its own views; this covers paths no view owns
    (``/api/v1/nope/``), which would otherwise get an HTML page a client cannot parse.
    """
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """500: the API's error body under /api/ (nothing about the failure), else Django's page."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Internal server error."}, status=500)
    return defaults.server_error(request)
