"""Enqueue Celery tasks only after the surrounding transaction commits."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)


def enqueue_on_commit(task_name: str, *args: object, queue: str | None = None) -> None:
    """Send task ``task_name`` with ``args`` once the current transaction commits (now if none).

    ``queue`` overrides the task's route (a node's own queue ``node.<name>``).

    A task sent earlier could run before the rows it reads are visible, or for rows a
    rollback then removes. A broker that is down is logged, never raised: the write this
    follows is committed and its response must say so. Nothing is lost, because the
    database is the record and is re-read on a timer (the beat's scheduling tick admits
    queued jobs; the reconcile step settles admitted jobs whose launch never started).
    """
    transaction.on_commit(lambda: _send_task(task_name, args, queue=queue))


def enqueue_once_on_commit(task_name: str, *, pending_key: str, ttl_s: float) -> None:
    """Like :func:`enqueue_on_commit`, but skip the send while one is already pending.

    The first caller sets ``pending_key`` in Redis (expiring after ``ttl_s``, in case the task
    is lost) and sends; later callers see the key and send nothing, since the pending task
    will read their rows too. The task deletes the key (:func:`clear_pending`) before it
    reads anything. Without Redis the task is sent as usual.
    """
    transaction.on_commit(lambda: _send_once(task_name, pending_key, ttl_s))


def clear_pending(pending_key: str) -> None:
    """Called first by a task sent with :func:`enqueue_once_on_commit`."""
    try:
        _redis().delete(pending_key)
    except Exception:  # noqa: BLE001 - redis and socket errors alike: the key expires anyway
        log.warning("could not clear %s", pending_key)


def _send_once(task_name: str, pending_key: str, ttl_s: float) -> None:
    try:
        if not _redis().set(pending_key, "1", nx=True, px=max(1, int(ttl_s * 1000))):
            return  # a task is already queued and has not started reading
    except Exception:  # noqa: BLE001 - without Redis, send it as usual
        log.warning("could not check %s; sending %s anyway", pending_key, task_name)
    _send_task(task_name, ())


def _redis() -> Any:
    from controlplane.lib.redis_clients import shared

    return shared(socket_timeout=2)


def _send_task(task_name: str, args: tuple[object, ...], *, queue: str | None = None) -> None:
    # Imported here: the Celery app imports Django settings, not the other way round.
    from workers.celery import app

    try:
        if queue:
            app.send_task(task_name, args=args, queue=queue)
        else:
            app.send_task(task_name, args=args)
    except Exception:  # noqa: BLE001 - kombu, redis and socket errors alike; see above
        log.warning("could not enqueue %s%r; the database still has it", task_name, args)
