"""Send channel-layer messages only after the surrounding transaction commits."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

# Consumers implement a handler of this name; it forwards ``payload`` to the socket.
FORWARD = "forward"


def publish(group: str, payload: Mapping[str, Any]) -> None:
    """Send ``payload`` to every socket in ``group`` now.

    A failing channel layer is logged, never raised: live updates are a convenience,
    the database stays the record.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": FORWARD, "payload": dict(payload)})
    except Exception:  # noqa: BLE001 - see docstring
        log.warning("could not publish to %s", group, exc_info=True)


def publish_on_commit(group: str, payload: Mapping[str, Any]) -> None:
    """Send ``payload`` to ``group`` once the current transaction commits (now if none)."""
    message = dict(payload)
    transaction.on_commit(lambda: publish(group, message))
