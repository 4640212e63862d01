"""One Redis client, and so one connection pool, per process and kind of use.

A client made for each call opens a TCP connection and does the handshake every time: about
1 ms of CPU here, against 0.04 ms for a command on a pooled connection, and a job's path
(scheduling passes, leases, allocations, pending keys) sent dozens of such commands. The pool
reconnects after a Redis restart (redis-py retries a command on a broken connection) and
starts afresh in a forked child (it checks the process id), so a Celery pool process never
shares a socket with its parent.
"""

from __future__ import annotations

import functools

import redis
from django.conf import settings


def shared(*, socket_timeout: float = 2.0, decode_responses: bool = False) -> redis.Redis:
    """The process's client for ``settings.REDIS_URL`` with these options."""
    return _client(settings.REDIS_URL, socket_timeout, decode_responses)


@functools.cache
def _client(url: str, socket_timeout: float, decode_responses: bool) -> redis.Redis:
    # Cached by URL too: tests point REDIS_URL at servers of their own.
    return redis.Redis.from_url(
        url, socket_timeout=socket_timeout, decode_responses=decode_responses
    )
