"""Tell a user's open sockets to re-check access when the user's memberships change.

A receiver, not a service call, because memberships are written in several places
(admin, seed_demo, the shell) and every one of them must end a socket that lost
its right to listen. It only sends a notice after commit; the consumer re-reads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from controlplane.telemetry.groups import user_group
from controlplane.tenancy.models import Membership

log = logging.getLogger(__name__)

ACCESS_CHANGED = "access.changed"  # consumers handle it in access_changed()


def notify_access_changed(user_id: int) -> None:
    """After commit, ask every socket of ``user_id`` to re-check what it may receive."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        notice = partial(
            async_to_sync(layer.group_send), user_group(user_id), {"type": ACCESS_CHANGED}
        )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            _quietly(notice)
        else:
            # Called from a thread that runs an event loop (async_to_sync refuses there).
            thread = threading.Thread(target=_quietly, args=(notice,), name="access-changed")
            thread.start()
            thread.join(timeout=5)

    transaction.on_commit(send)


def _quietly(send: Callable[[], object]) -> None:
    # Like lib.publish: a channel-layer failure must not fail the membership write that
    # already committed. The socket then keeps its groups until it reconnects.
    try:
        send()
    except Exception:  # noqa: BLE001
        log.warning("could not notify sockets of an access change", exc_info=True)


@receiver(post_save, sender=Membership)
@receiver(post_delete, sender=Membership)
def _membership_changed(sender: Any, instance: Membership, **kwargs: Any) -> None:
    notify_access_changed(instance.user_id)
