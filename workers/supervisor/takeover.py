"""Requeue a run the platform had to stop: worker lost, or worker shutting down.

Such a job is never failed: it goes back to the queue and resumes from its newest
checkpoint when it is admitted again. Callers hold the run's lease and pass its fence.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from controlplane.jobs import state
from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import request_schedule
from workers.runtime import checkpoint_files
from workers.supervisor import process
from workers.supervisor.identity import node_name

log = logging.getLogger(__name__)


def latest_checkpoint_step(run_dir: Path) -> int | None:
    """Step of the newest valid checkpoint the run wrote (the one it resumes from), or None.

    The run's user owns ``run_dir``: only regular files are hashed (never through a link),
    SYNCLANE_CHECKPOINT_MAX_MB in all at most.
    """
    cap = settings.SYNCLANE_CHECKPOINT_MAX_MB * 1024 * 1024
    found = checkpoint_files.latest_valid(run_dir, max_bytes=cap)
    return None if found is None else found[0]


def requeue_run(job: Job, *, fence: int, why: str) -> Job:
    """Stop what is left of ``job``'s run at a checkpoint, then requeue it (see ``requeue``).

    Its ranks may still train (their supervisor died, torchrun lives in its own session):
    on this node they get SIGTERM, write a checkpoint and exit. Returns the job refreshed.
    """
    pgid = job.placement.get("pgid")
    if pgid and job.placement.get("node") == node_name():
        if process.is_run_of(int(pgid), job.run_dir):
            log.info("job %s: stopping the run its lost supervisor left (pgid %s)", job.pk, pgid)
            process.stop_orphan(int(pgid), grace_s=settings.SYNCLANE_CANCEL_GRACE_S)
        process.reap(job.run_dir)
    return requeue(job, fence=fence, why=why, checkpoint=latest_checkpoint_step(job.run_dir))


def requeue(job: Job, *, fence: int, why: str, checkpoint: int | None) -> Job:
    """running/restarting -> queued, to resume from ``checkpoint``; request a pass.

    Raises state.TransitionError if the job moved on or another supervisor holds it.
    """
    job = state.transition(
        job,
        JobStatus.QUEUED,
        reason=f"{why}; requeued, resumes from step {checkpoint or 0}",
        fence=fence,
        checkpoint_step=checkpoint,
        preempt_requested=False,
        allocation_mbps=None,
    )
    request_schedule()
    return job
