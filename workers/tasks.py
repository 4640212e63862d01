"""Thin Celery tasks: ids in, re-read state, call one service, exit quietly if done."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from controlplane.jobs.services import jobs_admit
from workers.supervisor.reconcile import reconcile_step
from workers.supervisor.run import supervise

log = logging.getLogger(__name__)

# A launch task holds its worker process for the whole run.
RUN_TIME_LIMIT_S = 7 * 24 * 3600


@shared_task(name="workers.tasks.schedule_tick")
def schedule_tick() -> int:
    """One admission pass; returns how many jobs it admitted."""
    return len(jobs_admit())


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


@worker_ready.connect
def _reconcile_on_start(**_: object) -> None:
    # A worker that (re)starts settles what a previous worker left behind.
    reconcile.delay()
