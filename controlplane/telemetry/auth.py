"""Token authentication for websockets, for clients without a session (the CLI, scripts).

A socket whose session did not log anyone in may send ``Authorization: Token <key>`` (or
``?token=<key>``, for clients that cannot set headers). The key is checked by the API's own
token authentication class, so an expired or revoked API token is refused here as well.
Origin rules are unchanged: the Origin validator around this middleware still applies.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.settings import api_settings


class TokenAuthMiddleware:
    """Sets ``scope["user"]`` from an API token when the session gave no user."""

    def __init__(self, inner: Any):
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        user = scope.get("user")
        key = token_from_scope(scope)
        if key and (user is None or not user.is_authenticated):
            found = await user_for_token(key)
            if found is not None:
                scope = {**scope, "user": found}
        return await self.inner(scope, receive, send)


def token_from_scope(scope: dict[str, Any]) -> str | None:
    """The token key from the Authorization header or the ``token`` query parameter."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            if scheme.lower() in ("token", "bearer") and key.strip():
                return key.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    keys = query.get("token")
    return keys[0] if keys else None


@database_sync_to_async
def user_for_token(key: str) -> Any:
    """The active user of this API token, or None (unknown, expired or revoked)."""
    # The setting holds classes once DRF has imported the dotted paths (stubs say str).
    classes = cast("list[type[Any]]", api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    for auth_class in classes:
        check = getattr(auth_class(), "authenticate_credentials", None)
        if check is None:
            continue
        try:
            user, _ = check(key)
        except AuthenticationFailed:
            continue
        return user
    return None
