"""Thin Celery tasks: ids in, re-read state, call one service, exit quietly if done."""

from __future__ import annotations

import logging
import threading

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down

from controlplane.jobs.scheduler import schedule_pass
from workers.supervisor.node import start_heartbeat_thread
from workers.supervisor.reconcile import reconcile_step
from workers.supervisor.run import supervise

log = logging.getLogger(__name__)

# A launch task holds its worker process for the whole run.
RUN_TIME_LIMIT_S = 7 * 24 * 3600


@shared_task(name="workers.tasks.schedule_tick")
def schedule_tick() -> int:
    """One scheduling pass; returns how many jobs it admitted."""
    return len(schedule_pass().admitted)


@shared_task(
    name="workers.tasks.launch_job", time_limit=RUN_TIME_LIMIT_S, soft_time_limit=RUN_TIME_LIMIT_S
)
def launch_job(job_id: int) -> str | None:
    """Supervise job ``job_id`` until its run ends; returns its final status."""
    outcome = supervise(job_id)
    return outcome.status if outcome else None


@shared_task(name="workers.tasks.reconcile")
def reconcile() -> int:
    """Fail jobs whose supervisor stopped heart-beating; returns how many it fixed."""
    return reconcile_step()


_node_beat_stop = threading.Event()


@worker_ready.connect
def _on_worker_ready(**_: object) -> None:
    # This host's slots count once its worker is up, and for as long as it beats.
    start_heartbeat_thread(_node_beat_stop)
    # A worker that (re)starts settles what a previous worker left behind.
    reconcile.delay()


@worker_shutting_down.connect
def _on_worker_shutdown(**_: object) -> None:
    _node_beat_stop.set()
