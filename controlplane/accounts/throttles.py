"""Rate limits on logging in (password to token, and the login page), per IP and per username.

DRF's throttles keep their history in Django's cache. Rates are read from settings at
each request (DRF reads its own at import), so a deployment and a test can change them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class _LoginThrottle(SimpleRateThrottle):
    setting = ""

    def get_rate(self) -> str:
        return str(getattr(settings, self.setting))

    def allow_request(self, request: Any, view: Any) -> bool:
        # Re-read the rate: SimpleRateThrottle parses it once, in __init__.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)


class LoginIPThrottle(_LoginThrottle):
    """Login attempts from one client address."""

    scope = "login-ip"
    setting = "SYNCLANE_LOGIN_RATE_PER_IP"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class LoginUsernameThrottle(_LoginThrottle):
    """Login attempts for one username, from wherever they come."""

    scope = "login-user"
    setting = "SYNCLANE_LOGIN_RATE_PER_USER"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        username = submitted_username(request)
        if not username:
            return None  # nothing to count against; the per-IP limit still applies
        return self.cache_format % {"scope": self.scope, "ident": username.lower()[:150]}


def submitted_username(request: Any) -> str:
    """The username a login request carries ("" if none or not a string)."""
    data = getattr(request, "data", None)
    if data is None:
        data = request.POST
    value = data.get("username") if hasattr(data, "get") else None
    return value if isinstance(value, str) else ""


LOGIN_THROTTLES = (LoginIPThrottle, LoginUsernameThrottle)


def login_wait_s(request: Any) -> float | None:
    """Seconds to wait if a login attempt is over a limit now, else None (counts the attempt)."""
    waits = []
    for throttle_class in LOGIN_THROTTLES:
        throttle = throttle_class()
        if not throttle.allow_request(request, None):
            waits.append(throttle.wait() or 1.0)
    return max(waits) if waits else None
