"""Websocket Origin check: scheme, host and port must all match.

Browsers attach cookies to a websocket opened by any page, so a socket must come from our
own pages. Channels' AllowedHostsOriginValidator compares the host name alone: a page on
http://127.0.0.1:9999 (another program on the same machine) would pass for
http://127.0.0.1:8000. Here the Origin must equal, as (scheme, host, port), either the
origin the socket was opened to (its Host header and scheme, if that host is allowed) or
an entry of CSRF_TRUSTED_ORIGINS. A socket without an Origin is refused, as before.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def parse_origin(value: str) -> Origin | None:
    """``scheme://host[:port]`` as (scheme, host, port); None if it is not a web origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def own_origin(scope: dict[str, Any], headers: dict[bytes, bytes]) -> Origin | None:
    """The origin this socket was opened to (Host header, ws -> http, wss -> https)."""
    host = headers.get(b"host", b"").decode("latin-1")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") == "wss" or _forwarded_https(headers)
    return parse_origin(f"{'https' if secure else 'http'}://{host}")


def _forwarded_https(headers: dict[bytes, bytes]) -> bool:
    """True behind a TLS proxy that says so, when the settings trust it (SECURE_PROXY_SSL_HEADER)."""
    trusted = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not trusted:
        return False
    name, value = trusted
    header = name.removeprefix("HTTP_").replace("_", "-").lower().encode()
    return headers.get(header, b"").decode("latin-1") == value


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    origin = parse_origin(headers.get(b"origin", b"").decode("latin-1"))
    if origin is None:
        return False
    trusted = {parse_origin(entry) for entry in settings.CSRF_TRUSTED_ORIGINS}
    return origin == own_origin(scope, headers) or origin in trusted


class SameOriginValidator:
    """ASGI middleware: refuse (close before accept) a websocket from any other origin."""

    def __init__(self, application: Any):
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
