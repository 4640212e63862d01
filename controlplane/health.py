"""GET /healthz — is the database reachable, is Redis, how many Celery workers answer."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - any failure means "not ok"
        return False


def _redis_ok() -> bool:
    try:
        return bool(redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _live_workers() -> int:
    from workers.celery import app

    try:
        return len(app.control.ping(timeout=0.5) or [])
    except Exception:  # noqa: BLE001 - broker down: no worker can be counted
        return 0


def healthz(request: HttpRequest) -> JsonResponse:
    database, redis_up = _database_ok(), _redis_ok()
    workers = _live_workers() if redis_up else 0
    healthy = database and redis_up and workers > 0
    body = {
        "status": "ok" if healthy else "degraded",
        "database": "ok" if database else "down",
        "redis": "ok" if redis_up else "down",
        "workers": workers,
    }
    return JsonResponse(body, status=200 if healthy else 503)
