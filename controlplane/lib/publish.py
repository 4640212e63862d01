"""Send channel-layer messages only after the surrounding transaction commits."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine, Mapping
from typing import Any

from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

# Consumers implement a handler of this name; it forwards ``payload`` to the socket.
FORWARD = "forward"
# A send that takes longer is given up (logged): Redis is away or stuck.
SEND_TIMEOUT_S = 15.0


def publish(group: str, payload: Mapping[str, Any]) -> None:
    """Send ``payload`` to every socket in ``group`` now; return once it is sent.

    A failing channel layer is logged, never raised: live updates are a convenience,
    the database stays the record.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        _sender().run(layer.group_send(group, {"type": FORWARD, "payload": dict(payload)}))
    except Exception:  # noqa: BLE001 - see docstring
        log.warning("could not publish to %s", group, exc_info=True)


def publish_on_commit(group: str, payload: Mapping[str, Any]) -> None:
    """Send ``payload`` to ``group`` once the current transaction commits (now if none)."""
    message = dict(payload)
    transaction.on_commit(lambda: publish(group, message))


class _Sender:
    """An event loop in a daemon thread of its own, kept for the life of the process.

    ``async_to_sync`` from plain sync code (a Celery task, the ingest) starts a new thread and
    event loop for every call, and the channel layer opens a new Redis connection for every
    new loop: about 2 ms of CPU per message. Sends here reuse one loop and its connections,
    and still happen one after another in the caller's order (each call waits for its send).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="publish", daemon=True).start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout=SEND_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            raise


_lock = threading.Lock()
_current: _Sender | None = None


def _sender() -> _Sender:
    """This process's sender (a forked child starts its own: the thread is not inherited)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = _Sender()
        return _current
