"""Keep the Celery worker alive when Redis (its broker) is killed and restarted.

kombu 5.7.0's Redis transport ends the worker after a Redis restart with
``Unrecoverable error: AttributeError("'NoneType' object has no attribute 'hostname'")``.
The sequence, in the cleanup Celery runs after the broker connection was lost:

1. Celery's consumer calls ``Connection.collect()``: closing the default channel first
   reads the pending BRPOP, which raises ConnectionError (Redis is gone), so the channel
   stays open; then ``collect`` detaches the transport (``transport.client = None``).
2. Celery then calls ``Connection.close()``: the channel closes for real, and the virtual
   channel's ``close`` restores the unacknowledged (``acks_late``) messages. That needs a
   new Redis client, whose parameters come from ``transport.client``, now None: an
   AttributeError, which the cleanup's ``ignore_errors`` does not swallow.
3. With that step fixed the worker reconnects, but a launch that was running during the
   outage later acknowledges its message on the old, closed channel (its transport is
   gone: ``'NoneType' object has no attribute 'client'``), again an unrecoverable error.

No setting turns these off (``restore_at_shutdown`` is a class attribute, not a transport
option). The fix: the Redis QoS of a channel whose transport is gone does nothing on
restore, ack or reject, with a log line. Nothing is lost: those messages belong to the
launches this worker still runs, a launch that never ran is found by reconcile
(``admitted`` with no live launch), and a message restored later by the visibility
timeout is a duplicate launch, which the run's lease turns into a no-op.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)


def _detached(qos: Any) -> bool:
    """Whether the QoS's channel has lost its transport or the transport its connection."""
    transport = qos.channel.connection
    return transport is None or transport.client is None


def _skip_when_detached(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a QoS method so that it only logs on a channel whose broker connection is gone."""
    if getattr(method, "skips_when_detached", False):
        return method  # installed already

    @functools.wraps(method)
    def wrapper(qos: Any, *args: Any, **kwargs: Any) -> Any:
        if _detached(qos):
            log.warning(
                "broker connection lost: kombu's %s on its old channel skipped "
                "(%d unacknowledged message(s) there; reconcile settles their jobs)",
                method.__name__,
                len(qos._delivered),
            )
            if method.__name__ == "restore_unacked":
                qos._delivered.clear()
            return None
        return method(qos, *args, **kwargs)

    wrapper.skips_when_detached = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Patch kombu's Redis QoS (idempotent); called where the Celery app is made."""
    for name in ("restore_unacked", "ack", "reject"):
        setattr(kombu_redis.QoS, name, _skip_when_detached(getattr(kombu_redis.QoS, name)))
