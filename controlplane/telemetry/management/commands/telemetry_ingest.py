"""python manage.py telemetry_ingest — move run telemetry into the control plane."""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import redis
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from controlplane.telemetry.ingest import Ingest

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Read run telemetry streams from Redis; store samples and forward them live."

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = False

        def stop(*_: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        ingest = Ingest.from_settings()
        self.stdout.write("telemetry ingest running")
        while not stopping:
            close_old_connections()  # a long-lived loop must not keep a broken connection
            try:
                if ingest.step(block_ms=500) == 0:
                    time.sleep(0.05)  # no active streams: XREAD was not issued
            except (redis.RedisError, OSError) as exc:
                # Redis restarting (refused, reset, still loading): keep the loop, retry.
                # The next step re-reads which jobs stream from the database.
                log.warning("redis unavailable (%r); retrying in 1 s", exc)
                time.sleep(1.0)
