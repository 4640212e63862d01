"""A Celery app configured like the project's (late acks, retry forever), for broker tests.

    celery -A tests.workers.broker_app worker   # with BROKER_TEST_URL set

It installs workers.broker's fix the way workers/celery.py does, without Django, so the
test can start a worker on a Redis it kills. Tasks write a file, as there is no result
backend.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

from workers import broker

broker.install()

app = Celery("broker-test", broker=os.environ.get("BROKER_TEST_URL", "redis://127.0.0.1:1/0"))
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    worker_cancel_long_running_tasks_on_connection_loss=False,
    task_ignore_result=True,
)


@app.task
def touch(path: str) -> None:
    """Write the pool's parent (the worker) pid to ``path``: proof the worker ran a task."""
    Path(path).write_text(str(os.getppid()))


@app.task
def hold(started: str, done: str, seconds: float) -> None:
    """Write ``started``, stay busy ``seconds`` (like a launch supervising a run), write ``done``."""
    Path(started).write_text(str(os.getpid()))
    time.sleep(seconds)
    Path(done).write_text(str(os.getpid()))
