"""Lockout after repeated failed logins, by django-axes.

Axes counts failures per (username, client address) in the database and refuses even a
right password for the cool-off period; these hooks adapt it to Synclane.
"""

from __future__ import annotations

import math
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse


class LockoutBackend(AxesStandaloneBackend):
    """Axes' lockout check, skipped when there is no request to attribute the attempt to.

    Every login path of the site (login page, token endpoint, admin) passes the request;
    only code without one (Django's test client ``login()``, a shell) reaches the skip.
    """

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        return super().authenticate(request, *args, **kwargs)


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """429 for a locked-out login: JSON for the API, the login page (with the reason) otherwise."""
    cool_off = get_cool_off(request)
    wait_s = math.ceil(cool_off.total_seconds()) if cool_off else None
    detail = "Too many failed logins: this account is locked for this address"
    detail += f"; try again in {math.ceil(wait_s / 60)} minutes." if wait_s else "."
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": detail}, status=429)
    else:
        response = TemplateResponse(
            request,
            "registration/login.html",
            {"form": AuthenticationForm(request), "refusal": detail},
            status=429,
        )
        response.render()
    if wait_s:
        response["Retry-After"] = str(wait_s)
    return response
