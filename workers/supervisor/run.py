"""Supervise one job's run: launch, heartbeat, restart from checkpoint, cancel.

Called by the ``launch_job`` Celery task; holds that worker process until the run ends.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from controlplane.jobs import state
from controlplane.jobs.choices import ACTIVE, JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_heartbeat, request_schedule
from workers.runtime import protocol
from workers.supervisor import process
from workers.supervisor.command import LaunchSpec, build_command, build_env

log = logging.getLogger(__name__)

POLL_S = 0.25
_CHECKPOINT_NAME = re.compile(rf"^{re.escape(protocol.CHECKPOINT_PREFIX)}(\d+)\.pt$")


@dataclass(frozen=True)
class Outcome:
    status: str
    exit_code: int | None
    reason: str


def launch_spec_for(job: Job) -> LaunchSpec:
    return LaunchSpec(
        job_id=job.pk,
        workload=job.workload,
        world_size=job.world_size,
        steps=job.steps,
        sync=job.sync,
        run_dir=job.run_dir,
        redis_url=settings.REDIS_URL,
        checkpoint_every=settings.SYNCLANE_CHECKPOINT_EVERY,
        hyperparameters=job.hyperparameters,
    )


def latest_checkpoint_step(run_dir: Path) -> int | None:
    """Step of the newest checkpoint the workload wrote, or None if there is none."""
    if not run_dir.is_dir():
        return None
    steps = [int(m.group(1)) for f in run_dir.iterdir() if (m := _CHECKPOINT_NAME.match(f.name))]
    return max(steps, default=None)


def worker_exit_reason(run_dir: Path) -> str | None:
    """The reason a rank wrote to RUN_DIR/exit.json before a non-zero exit, if any.

    torchrun flattens a failed rank to exit status 1; this file keeps the real cause.
    """
    try:
        info = json.loads((run_dir / protocol.EXIT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return (
        f"{info.get('reason', 'stopped')} (rank exit {info.get('code')}, step {info.get('step')})"
    )


def supervise(job_id: int) -> Outcome | None:
    """Run the admitted job ``job_id`` to its end; return the outcome.

    Returns None (and does nothing) if the job is not admitted: the task is idempotent.
    Steps: 1. mark running; 2. spawn torchrun; 3. watch (heartbeat, cancel);
    4. on failure restart from the last checkpoint while restarts remain; 5. record the end.
    """
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.status != JobStatus.ADMITTED:
        return None
    _wait_for_victims(job)
    spec = launch_spec_for(job)
    argv, env = build_command(spec), build_env(spec, os.environ)
    placement = {
        "node": socket.gethostname(),
        "ranks": job.world_size,
        "resumed_from": latest_checkpoint_step(job.run_dir),
    }
    reason = "started"
    expected = JobStatus.ADMITTED
    while True:
        (spec.run_dir / protocol.EXIT_FILE).unlink(missing_ok=True)
        proc = process.spawn(argv, env=env, run_dir=spec.run_dir)
        placement["pgid"] = proc.pid
        job = state.transition(
            job, JobStatus.RUNNING, reason=reason, expected=expected, placement=placement
        )
        outcome = _watch(job, proc)
        process.reap(spec.run_dir)
        job.refresh_from_db()
        checkpoint = latest_checkpoint_step(spec.run_dir)
        if outcome.status == JobStatus.RESTARTING and job.restarts < settings.SYNCLANE_MAX_RESTARTS:
            job = state.transition(
                job,
                JobStatus.RESTARTING,
                reason=f"{outcome.reason}; restarting from step {checkpoint or 0}",
                restarts=job.restarts + 1,
                exit_code=outcome.exit_code,
                checkpoint_step=checkpoint,
            )
            reason = f"restarted (attempt {job.restarts}) from step {checkpoint or 0}"
            expected = JobStatus.RESTARTING
            continue
        if outcome.status == JobStatus.PREEMPTED:
            _requeue(job, outcome, checkpoint)
            return outcome
        final = JobStatus.FAILED if outcome.status == JobStatus.RESTARTING else outcome.status
        state.transition(
            job,
            final,
            reason=outcome.reason,
            exit_code=outcome.exit_code,
            exit_reason=outcome.reason,
            checkpoint_step=checkpoint,
        )
        request_schedule()  # slots were freed
        return Outcome(final, outcome.exit_code, outcome.reason)


def _requeue(job: Job, outcome: Outcome, checkpoint: int | None) -> None:
    """running -> preempted -> queued, keeping the checkpoint to resume from."""
    job = state.transition(
        job,
        JobStatus.PREEMPTED,
        reason=f"preempted; checkpoint at step {checkpoint or 0}",
        exit_code=outcome.exit_code,
        checkpoint_step=checkpoint,
        preempt_requested=False,
        allocation_mbps=None,
    )
    state.transition(job, JobStatus.QUEUED, reason=f"requeued; resumes from step {checkpoint or 0}")
    request_schedule()


def _wait_for_victims(job: Job) -> None:
    """Hold the launch until the jobs this admission preempts have released their slots.

    Bounded: a victim that does not stop within its grace period (plus slack) is not
    allowed to block the admitted job forever.
    """
    victims = job.placement.get("waits_for") or []
    deadline = time.monotonic() + settings.SYNCLANE_CANCEL_GRACE_S + 30
    while victims and time.monotonic() < deadline:
        if not Job.objects.filter(pk__in=victims, status__in=ACTIVE).exists():
            return
        time.sleep(POLL_S)
    if victims:
        log.warning("job %s: launching although victims %s still hold slots", job.pk, victims)


def _watch(job: Job, proc: subprocess.Popen[bytes]) -> Outcome:
    """Poll the run until it ends or is cancelled; heartbeat meanwhile."""
    next_beat = 0.0
    while True:
        code = proc.poll()
        if code is not None:
            if code == 0:
                return Outcome(JobStatus.SUCCEEDED, 0, "finished")
            reason = worker_exit_reason(Path(job.run_dir)) or f"torchrun exited with code {code}"
            return Outcome(JobStatus.RESTARTING, code, reason)
        now = time.monotonic()
        if now >= next_beat:
            next_beat = now + settings.SYNCLANE_HEARTBEAT_S
            close_old_connections()
            job_heartbeat(job_id=job.pk)
            flags = (
                Job.objects.filter(pk=job.pk)
                .values("cancel_requested", "preempt_requested")
                .first()
            )
            if flags and flags["cancel_requested"]:
                code = process.terminate_group(proc, grace_s=settings.SYNCLANE_CANCEL_GRACE_S)
                return Outcome(JobStatus.CANCELLED, code, "cancelled by user")
            if flags and flags["preempt_requested"]:
                # SIGTERM: the workload writes a checkpoint and exits; it resumes from it later.
                code = process.terminate_group(proc, grace_s=settings.SYNCLANE_CANCEL_GRACE_S)
                return Outcome(JobStatus.PREEMPTED, code, "preempted")
        time.sleep(POLL_S)
