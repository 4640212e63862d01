"""The Celery app.

    celery -A workers worker -B -Q control,runs --concurrency 6

``runs`` tasks hold a worker process for a whole training run (the supervisor
watches torchrun), so the worker's concurrency must exceed the slots it can run;
``control`` tasks (scheduler ticks, reconcile) are short.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("synclane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_routes = {
    "workers.tasks.launch_job": {"queue": "runs"},
    "workers.tasks.*": {"queue": "control"},
}
app.conf.task_default_queue = "control"
app.conf.beat_schedule = {
    # Ticks also run on every submit and every job end; the beat is the safety net.
    "schedule-tick": {"task": "workers.tasks.schedule_tick", "schedule": 5.0},
    "reconcile": {"task": "workers.tasks.reconcile", "schedule": 10.0},
}
# Imported by the worker after Celery's Django fix-up has set Django up.
app.conf.imports = ["workers.tasks"]
