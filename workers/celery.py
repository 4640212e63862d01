"""The Celery app.

    celery -A workers worker -Q control,runs --concurrency 6
    celery -A workers beat          # one sends; more wait as standbys (workers.beat)

``runs`` tasks hold a worker process for a whole training run (the supervisor
watches torchrun), so the worker's concurrency must exceed the slots it can run;
``control`` tasks (scheduler ticks, reconcile) are short. Every worker also consumes its
node's own queue, ``node.<name>`` (SYNCLANE_NODE_NAME, default the host name), where the
launches of the ranks placed on that node go (added in ``workers.tasks``).
"""

from __future__ import annotations

import os

from celery import Celery

from workers import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

# A Redis restart must not end the worker (see workers/broker.py).
broker.install()

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
    "expire-bundles": {"task": "workers.tasks.expire_bundles", "schedule": 3600.0},
}
# Only the beat holding the cluster's lock sends (workers/beat.py).
app.conf.beat_scheduler = "workers.beat:ClusterScheduler"
# Imported by the worker after Celery's Django fix-up has set Django up.
app.conf.imports = ["workers.tasks"]
