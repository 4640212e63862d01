"""Thin Celery tasks: ids in, re-read state, call one service, exit quietly if done."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from typing import Any

import redis
from celery import shared_task
from celery.signals import (
    celeryd_after_setup,
    task_postrun,
    task_prerun,
    worker_ready,
    worker_shutting_down,
)
from django.db import close_old_connections

from controlplane.bundles.services import bundles_expire
from controlplane.jobs.choices import node_queue
from controlplane.jobs.scheduler import schedule_pass
from controlplane.jobs.services import SCHEDULE_PENDING_KEY
from controlplane.lib.tasks import clear_pending
from workers.supervisor import lease as leases
from workers.supervisor import process
from workers.supervisor.follower import supervise_part
from workers.supervisor.identity import node_name
from workers.supervisor.node import start_heartbeat_thread
from workers.supervisor.reconcile import reconcile_step
from workers.supervisor.run import supervise

log = logging.getLogger(__name__)

# A launch task holds its worker process for the whole run.
RUN_TIME_LIMIT_S = 7 * 24 * 3600


@shared_task(name="workers.tasks.schedule_tick")
def schedule_tick() -> int:
    """One scheduling pass; returns how many jobs it admitted."""
    clear_pending(SCHEDULE_PENDING_KEY)  # changes from now on ask for the next pass
    return len(schedule_pass().admitted)


# Acknowledged only when the run ends, and handed back to the queue if the worker process
# dies: a lost launch is delivered again. supervise() takes the run's lease first, so a
# duplicate delivery for a run that is already supervised does nothing. A job placed on
# several nodes gets one launch per node, on that node's queue ``node.<name>``: node rank 0
# drives the job (supervise), every other node runs its part (supervise_part), each under
# a lease of its own.
@shared_task(
    name="workers.tasks.launch_job",
    time_limit=RUN_TIME_LIMIT_S,
    soft_time_limit=RUN_TIME_LIMIT_S,
    acks_late=True,
    reject_on_worker_lost=True,
)
def launch_job(job_id: int, node_rank: int | None = None) -> str | None:
    """Supervise job ``job_id`` (node rank ``node_rank``'s part) until its run ends.

    Returns its final status (a part: why it stopped following), None if nothing to do.
    """
    if node_rank:
        return supervise_part(job_id, node_rank)
    outcome = supervise(job_id)
    return outcome.status if outcome else None


@shared_task(name="workers.tasks.reconcile")
def reconcile() -> int:
    """Settle jobs whose launch or supervisor vanished; returns how many it settled."""
    return reconcile_step()


@shared_task(name="workers.tasks.expire_bundles")
def expire_bundles() -> int:
    """Delete code bundles unused for SYNCLANE_BUNDLE_TTL_S; returns how many."""
    return bundles_expire()


@task_prerun.connect
@task_postrun.connect
def _hand_back_connections(**_: object) -> None:
    # What a request does in Django: an unusable or expired connection is closed, and with a
    # pool (PostgreSQL) a closed one goes back to it, so the next task takes it again instead
    # of opening a new one (settings.CELERY_DB_REUSE_MAX keeps Celery from closing the pool).
    close_old_connections()


_node_beat_stop = threading.Event()


@celeryd_after_setup.connect
def _consume_node_queue(sender: str, instance: Any, **_: object) -> None:
    """Consume this node's own queue besides those ``-Q`` named (sent after -Q is applied)."""
    instance.app.amqp.queues.select_add(node_queue(node_name()))


@worker_ready.connect
def _on_worker_ready(**_: object) -> None:
    # This host's slots count once its worker is up, and for as long as it beats.
    start_heartbeat_thread(_node_beat_stop)
    # A worker that (re)starts settles what a previous worker left behind.
    reconcile.delay()


@worker_shutting_down.connect
def _on_worker_shutdown(**_: object) -> None:
    _node_beat_stop.set()
    # A warm shutdown waits for running tasks, and a launch task lasts a whole run: tell
    # this worker's supervisors (its pool processes) to checkpoint and requeue their runs.
    drain_supervisors()


def drain_supervisors() -> list[int]:
    """SIGTERM the pool processes of this worker that hold a run's lease; return their pids."""
    signalled = []
    try:
        held = list(leases.held_by_this_host())
    except redis.RedisError:
        log.warning("could not list the runs to drain", exc_info=True)
        return []
    for job_id, pid in held:
        if process.parent_pid(pid) == os.getpid():
            log.info("draining job %s: SIGTERM to its supervisor (pid %s)", job_id, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    return signalled
