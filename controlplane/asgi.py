"""ASGI entry point: HTTP via Django, websockets via Channels.

daphne -b 127.0.0.1 -p 8000 controlplane.asgi:application
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

# Imported after Django is set up: these import models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from controlplane.lib.origin import SameOriginValidator  # noqa: E402
from controlplane.routing import websocket_urlpatterns  # noqa: E402
from controlplane.telemetry.auth import TokenAuthMiddleware  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # A websocket whose Origin (scheme, host and port) is not the server's own or a
        # trusted one is refused. A socket is authenticated by its session, or else by an
        # API token (the CLI).
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
    }
)
