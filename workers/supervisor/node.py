"""Register this worker host as a Node and keep it alive while the worker runs.

A beat refreshes what the host says about itself (slots, address, labels, fabric) and when it
was last seen; it never touches the node's state, so a cordon or drain outlives a restart.
"""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections
from django.utils import timezone

from controlplane.jobs.models import Node
from workers.supervisor.identity import NodeIdentity, this_node

log = logging.getLogger(__name__)

BEAT_S = 5.0


def node_heartbeat(identity: NodeIdentity | None = None) -> Node:
    """Create or refresh this host's Node row; return it."""
    me = identity or this_node()
    now = timezone.now()
    node, _ = Node.objects.update_or_create(
        name=me.name,
        defaults={
            "slots": me.slots,
            "fabric_mbps": me.fabric_mbps,
            "address": me.address,
            "labels": me.labels,
            "last_seen": now,
        },
        create_defaults={
            "slots": me.slots,
            "fabric_mbps": me.fabric_mbps,
            "address": me.address,
            "labels": me.labels,
            "last_seen": now,
            "registered_at": now,
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
