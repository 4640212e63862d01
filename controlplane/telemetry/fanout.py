"""Fan-out: channel-layer sends from sync code on one long-lived event loop.

Why not ``async_to_sync(layer.group_send)`` per message: each call spins an event loop and
a fresh Redis connection, which caps the ingest loop at a few hundred messages a second. Nor
``lib.publish``, which keeps one loop too but sends one message at a time and waits for it.
Here one daemon thread owns a loop and the layer's connections; the ingest hands it a whole
batch, and the batch's groups are sent to concurrently.

A slow browser cannot slow the others: ``group_send`` appends to each member's own
channel list in Redis and never waits for a reader (a member over its capacity loses
messages, it does not hold anyone back), and each socket drains its own list.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from controlplane.lib.publish import FORWARD

log = logging.getLogger(__name__)

Outgoing = tuple[str, Mapping[str, Any]]
# Consumers handle this too: forward each of ``payloads`` in order (see consumers.py).
FORWARD_MANY = "forward.many"


class Fanout:
    """Sends batches of (group, payload) on its own loop; one batch in flight at a time."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._layer: Any = None
        self._pending: Future[int] | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="fanout", daemon=True)
        self._thread.start()

    def send(self, messages: Iterable[Outgoing]) -> Future[int] | None:
        """Queue one batch after the previous one has gone; return its future (None if empty).

        Waiting for the previous batch keeps every group's messages in order and bounds
        memory when Redis is slow: the ingest then reads more per batch, not more batches.
        """
        batch = list(messages)
        if not batch:
            return None
        self.flush()
        self._pending = asyncio.run_coroutine_threadsafe(self._send(batch), self._loop)
        return self._pending

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until the batch in flight (if any) has been handed to the channel layer."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result(timeout=timeout)
            except Exception:  # noqa: BLE001 - live updates are best effort; the DB is the record
                log.warning("fan-out batch failed", exc_info=True)

    async def _send(self, batch: list[Outgoing]) -> int:
        if self._layer is None:
            # Our own layer instance: its connections belong to this loop only.
            self._layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        by_group: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for group, payload in batch:
            by_group[group].append(payload)
        await asyncio.gather(*(self._send_group(g, ps) for g, ps in by_group.items()))
        return len(batch)

    async def _send_group(self, group: str, payloads: list[Mapping[str, Any]]) -> None:
        # One channel-layer message per group and batch: a group_send costs several Redis
        # round trips, so when the ingest falls behind its batches grow and each message
        # gets cheaper (the backlog shrinks instead of compounding).
        if len(payloads) == 1:
            await self._layer.group_send(group, {"type": FORWARD, "payload": dict(payloads[0])})
        else:
            await self._layer.group_send(
                group, {"type": FORWARD_MANY, "payloads": [dict(p) for p in payloads]}
            )


_shared: Fanout | None = None
_lock = threading.Lock()


def shared_fanout() -> Fanout:
    """Return the process's fan-out (started on first use)."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = Fanout()
        return _shared
