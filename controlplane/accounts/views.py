"""The login page, rate-limited like the token endpoint."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from controlplane.accounts.throttles import login_wait_s


class LoginView(auth_views.LoginView):
    """Django's login page; a POST over the per-IP or per-username rate is a 429."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        wait_s = login_wait_s(request)
        if wait_s is None:
            return super().post(request, *args, **kwargs)
        seconds = math.ceil(wait_s)
        context = self.get_context_data(
            refusal=f"Too many login attempts: try again in {seconds} seconds."
        )
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(seconds)
        return response


def rate_limited(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a login view (the admin's) in the same per-IP and per-username limits: a 429."""

    @wraps(view)
    def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        wait_s = login_wait_s(request) if request.method == "POST" else None
        if wait_s is None:
            return view(request, *args, **kwargs)
        seconds = math.ceil(wait_s)
        response = HttpResponse(
            f"Too many login attempts: try again in {seconds} seconds.\n",
            status=429,
            content_type="text/plain",
        )
        response["Retry-After"] = str(seconds)
        return response

    return limited
