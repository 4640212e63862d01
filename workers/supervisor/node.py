"""Register this worker host as a Node and keep it alive while the worker runs."""

from __future__ import annotations

import logging
import socket
import threading

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from controlplane.jobs.models import Node

log = logging.getLogger(__name__)

BEAT_S = 5.0


def node_heartbeat(name: str | None = None) -> Node:
    """Create or refresh this host's Node row; return it."""
    node, _ = Node.objects.update_or_create(
        name=name or socket.gethostname(),
        defaults={
            "slots": settings.SYNCLANE_CLUSTER_SLOTS,
            "fabric_mbps": settings.SYNCLANE_NODE_FABRIC_MBPS,
            "last_seen": timezone.now(),
        },
    )
    return node


def start_heartbeat_thread(stop: threading.Event) -> threading.Thread:
    """Beat every few seconds until ``stop`` is set (daemon: dies with the worker)."""

    def beat() -> None:
        while not stop.is_set():
            try:
                close_old_connections()
                node_heartbeat()
            except Exception:  # noqa: BLE001 - a missed beat must not kill the thread
                log.warning("node heartbeat failed", exc_info=True)
            stop.wait(BEAT_S)

    thread = threading.Thread(target=beat, name="synclane-node-heartbeat", daemon=True)
    thread.start()
    return thread
