"""Settle every non-terminal job whose driver vanished (worker killed, stack restarted).

    reconcile_step()   # run by the ``reconcile`` task: on every worker start, and by beat

Each case is a step function that returns how many jobs it settled:

* ``admitted_without_launch``: admitted, and no launch took its lease within
  SYNCLANE_LAUNCH_TIMEOUT_S -> back to the queue (readmitted by the next pass).
* ``runs_with_stale_lease``: running/restarting, lease lapsed and no heartbeat for a lease
  lifetime -> the run is stopped at a checkpoint and requeued (``takeover.requeue_run``).
* ``preempted_without_requeue``: preempted, and no supervisor holds it to requeue it -> queued.
* ``preemptions_of_gone_victims``: a preemption request left on a job that no longer holds
  slots (it ended, or was requeued) -> the flag is cleared, so it cannot stop a later run.
* ``redis_users_of_unsupervised_runs``: a run's Redis ACL user whose run nobody supervises
  (its supervisor died before deleting it) -> deleted, so no credential outlives its run.

A job is only touched under its lease (taken here, with a new fence), so a reconciler
never races a live supervisor, and a supervisor that was only slow changes nothing after.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

import redis
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from controlplane.jobs import state
from controlplane.jobs.choices import ACTIVE, JobStatus
from controlplane.jobs.models import Job, Node
from controlplane.jobs.services import request_schedule
from workers.supervisor import lease as leases
from workers.supervisor import redis_acl, takeover
from workers.supervisor.identity import node_name

log = logging.getLogger(__name__)


def reconcile_step() -> int:
    """Run every case once; return how many jobs (and leaked Redis users) were settled."""
    settled = (
        admitted_without_launch()
        + runs_with_stale_lease()
        + preempted_without_requeue()
        + preemptions_of_gone_victims()
        + redis_users_of_unsupervised_runs()
    )
    if settled:
        log.info("reconcile settled %d job(s) or Redis user(s)", settled)
    return settled


def _ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


def admitted_without_launch() -> int:
    """Requeue admitted jobs that no launch has taken within the launch timeout."""
    stale = Job.objects.filter(
        status=JobStatus.ADMITTED, admitted_at__lt=_ago(settings.SYNCLANE_LAUNCH_TIMEOUT_S)
    )
    settled = 0
    for job in stale:
        settled += _under_lease(
            job,
            JobStatus.ADMITTED,
            lambda job, fence: state.transition(
                job, JobStatus.QUEUED, reason="no live launch; back to the queue", fence=fence
            ),
        )
    if settled:
        request_schedule()
    return settled


def runs_with_stale_lease() -> int:
    """Stop and requeue runs whose supervisor stopped renewing its lease and heartbeat."""
    cutoff = _ago(settings.SYNCLANE_LEASE_TTL_S)
    stale = Job.objects.filter(status__in=[JobStatus.RUNNING, JobStatus.RESTARTING]).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    settled = 0
    for job in stale:
        if _on_another_live_node(job):
            continue  # that node's worker reconciles its own runs (it can stop them)
        settled += _under_lease(
            job,
            job.status,
            lambda job, fence: takeover.requeue_run(
                job, fence=fence, why="its supervisor was lost"
            ),
        )
    return settled


def preempted_without_requeue() -> int:
    """Put preempted jobs that no supervisor is requeueing back in the queue."""
    settled = 0
    for job in Job.objects.filter(status=JobStatus.PREEMPTED):
        settled += _under_lease(
            job,
            JobStatus.PREEMPTED,
            lambda job, fence: state.transition(
                job,
                JobStatus.QUEUED,
                reason=f"requeued; resumes from step {job.checkpoint_step or 0}",
                fence=fence,
            ),
        )
    if settled:
        request_schedule()
    return settled


def preemptions_of_gone_victims() -> int:
    """Clear preemption requests left on jobs that no longer hold slots."""
    return (
        Job.objects.filter(preempt_requested=True)
        .exclude(status__in=ACTIVE)
        .update(preempt_requested=False)
    )


def redis_users_of_unsupervised_runs() -> int:
    """Delete the Redis users of runs whose lease nobody holds; return how many went.

    A supervisor takes the run's lease before it creates the run's user and deletes the
    user before it lets the lease go, so a user without a lease was left by a supervisor
    that died (worker killed) or by a run taken over since. It runs after the other cases,
    which take such runs over. Should a launch take the lease and create its user between
    the look and the delete, its supervisor puts the user back on its first heartbeat,
    before the ranks connect (``Supervision.beat``), as after a Redis restart.
    Raises redis.RedisError when Redis is unreachable.
    """
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    try:
        unsupervised = [j for j in redis_acl.job_ids_with_users(client) if not leases.holder(j)]
        for job_id in unsupervised:
            log.info("job %s: deleting the Redis user its lost supervisor left", job_id)
            redis_acl.delete_job_user(client, job_id)
        return len(unsupervised)
    finally:
        client.close()


def _under_lease(job: Job, expected: str, settle: Callable[[Job, int], object]) -> int:
    """Call ``settle(job, fence)`` holding the job's lease if it is still ``expected``.

    Returns 1 if it settled the job, 0 if a supervisor holds it or it moved on.
    """
    lease = leases.acquire(job.pk)
    if lease is None:
        return 0
    try:
        job.refresh_from_db()
        if job.status != expected:
            return 0
        settle(job, lease.fence)
        return 1
    except state.TransitionError:
        return 0
    finally:
        lease.release()


def _on_another_live_node(job: Job) -> bool:
    """True if the job ran on another node that is still beating (it settles its own)."""
    node = job.placement.get("node")
    if not node or node == node_name():
        return False
    return Node.objects.filter(
        name=node, last_seen__gte=_ago(settings.SYNCLANE_NODE_LOST_AFTER_S)
    ).exists()
