"""One beat for the whole cluster: a Celery beat scheduler that sends only while it holds a lock.

    celery -A workers beat        # on one host, or on several: the others wait as standbys

Every beat process uses :class:`ClusterScheduler` (``beat_scheduler`` in ``workers.celery``).
The lock is a Redis key (``synclane:beat``) holding the beat's id that expires after
``LOCK_TTL_S`` unless its holder renews it on every tick; a beat that does not hold it sends
nothing and tries again every ``STANDBY_S``. So starting a second beat, by mistake or as a
standby on another host, never runs the scheduling tick and reconcile twice, and a standby takes
over within ``LOCK_TTL_S`` of the leader dying.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

import redis
from celery.beat import PersistentScheduler

log = logging.getLogger(__name__)

LOCK_KEY = "synclane:beat"
LOCK_TTL_S = 20.0
STANDBY_S = 2.0
# The leader ticks at least this often, so it renews the lock well within its lifetime.
RENEW_S = LOCK_TTL_S / 4

# Take the lock if free, renew it if ours; 1 held, 0 held by another beat.
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class BeatLock:
    """The cluster's beat lock as seen by one beat process (``owner`` is its id)."""

    def __init__(self, client: redis.Redis, *, ttl_s: float = LOCK_TTL_S, key: str = LOCK_KEY):
        self.client = client
        self.key = key
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held = False

    def hold(self) -> bool:
        """Take or renew the lock; True while this beat holds it (False if Redis is away)."""
        try:
            held = bool(self.client.eval(_HOLD, 1, self.key, self.owner, self.ttl_ms))
        except (redis.RedisError, OSError):
            log.warning("beat lock: Redis unreachable, sending nothing", exc_info=True)
            held = False
        if held != self.held:
            log.info("beat lock %s: %s", "taken" if held else "lost", self.owner)
        self.held = held
        return held

    def release(self) -> None:
        try:
            self.client.eval(_RELEASE, 1, self.key, self.owner)
        except (redis.RedisError, OSError):
            log.warning("beat lock: could not release", exc_info=True)
        self.held = False


class ClusterScheduler(PersistentScheduler):
    """Celery's persistent beat scheduler, sending only while it holds the cluster's lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from django.conf import settings

        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
        self.lock = BeatLock(client)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self.lock.hold():
            return STANDBY_S
        return float(min(super().tick(*args, **kwargs), RENEW_S))

    def close(self) -> None:
        super().close()
        self.lock.release()
