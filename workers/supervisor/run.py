"""Supervise one job's run: launch, heartbeat, restart from checkpoint, cancel.

Called by the ``launch_job`` Celery task; holds that worker process until the run ends.
For a job placed on several nodes this is node rank 0's supervisor: it drives the job and
starts, watches and stops the other nodes through a ``Crew`` (``crew.py``); the other
nodes run ``follower.py``.
The supervisor holds the run's lease (``lease.py``) and writes every transition under its
fencing token; on SIGTERM (a clean shutdown of the worker) it stops the run at a
checkpoint and puts the job back in the queue.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import redis
from django.conf import settings
from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from controlplane.bundles.services import fetch_token
from controlplane.bundles.services import limits as bundle_limits
from controlplane.jobs import adapters, state
from controlplane.jobs.choices import ACTIVE, TERMINAL, JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_heartbeat, request_schedule
from controlplane.lib import redis_clients
from controlplane.telemetry.models import MetricSample
from workers.runtime import protocol, run_files
from workers.supervisor import bundles as bundle_cache
from workers.supervisor import failure, gang, isolation, process, redis_acl, takeover
from workers.supervisor import lease as leases
from workers.supervisor.bundles import BundleFetchError
from workers.supervisor.command import LaunchSpec, build_command, build_env
from workers.supervisor.crew import Crew
from workers.supervisor.identity import node_name
from workers.supervisor.takeover import latest_checkpoint_step

log = logging.getLogger(__name__)

POLL_S = 0.25
FIRST_BEAT_S = 0.5  # after the spawn (see _watch)


# Not a job status: the run's lease went to another supervisor, which now drives it.
LOST = "lost"


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: a JobStatus value (QUEUED: requeued by a shutdown) or LOST."""

    status: str
    exit_code: int | None
    reason: str


def launch_spec_for(job: Job, *, redis_url: str, code_dir: Path | None = None) -> LaunchSpec:
    """The job's launch: ``redis_url`` is its own ACL user's, ``code_dir`` its bundle copy.

    A job placed on several nodes is paced at SYNCLANE_INTERNODE_LINK_MBPS when set (the
    emulated link between nodes on one machine); a job on one node never is.
    """
    spans_nodes = bool(gang.nodes_of(job))
    return LaunchSpec(
        job_id=job.pk,
        workload=job.workload,
        world_size=job.world_size,
        steps=job.steps,
        sync=job.sync,
        run_dir=job.run_dir,
        redis_url=redis_url,
        checkpoint_every=settings.SYNCLANE_CHECKPOINT_EVERY,
        hyperparameters=job.hyperparameters,
        entrypoint=tuple(job.entrypoint) if job.runs_code else (),
        code_dir=code_dir,
        env=job.env if job.runs_code else {},
        python=settings.SYNCLANE_RUN_PYTHON or sys.executable,
        link_mbps=settings.SYNCLANE_INTERNODE_LINK_MBPS if spans_nodes else None,
    )


def prepare_code(job: Job, *, folder: str = "code") -> Path:
    """Fetch the job's bundle into this node's cache (once) and copy it into the run folder.

    The download goes through the control plane's HTTP endpoint with a credential for
    this job alone. Raises BundleFetchError.
    """
    url = f"{settings.SYNCLANE_CONTROL_URL}/api/v1/internal/bundles/{job.bundle_sha256}/"
    tree = bundle_cache.ensure_unpacked(
        sha256=job.bundle_sha256,
        cache_dir=Path(settings.SYNCLANE_BUNDLE_CACHE_DIR),
        url=url,
        token=fetch_token(job_id=job.pk),
        limits=bundle_limits(),
    )
    return bundle_cache.copy_for_run(tree, job.run_dir, folder=folder)


def prepare_run(
    job: Job, *, code_folder: str = "code"
) -> tuple[isolation.RunAs | None, Path | None]:
    """Who the run executes as and its code folder; the run folder made ready for them.

    ``code_folder``: each node of a run across nodes copies the code into a folder of its
    own (the run folder is shared). Raises BundleFetchError, ValueError (a bad
    SYNCLANE_RUN_AS) or OSError.
    """
    run_as = isolation.run_as_for(
        job.pk, user=settings.SYNCLANE_RUN_AS, uids=settings.SYNCLANE_RUN_AS_UIDS
    )
    code_dir = prepare_code(job, folder=code_folder) if job.runs_code else None
    isolation.prepare_run_dir(job.run_dir, run_as)
    if run_as is not None:
        isolation.make_control_files_private(
            Path(settings.RUN_DIR), Path(settings.SYNCLANE_JOBS_DIR)
        )
    return run_as, code_dir


def worker_exit_reason(run_dir: Path) -> str | None:
    """The reason a rank wrote to RUN_DIR/exit.json before a non-zero exit, if any.

    torchrun flattens a failed rank to exit status 1; this file keeps the real cause.
    """
    try:  # the run's file: a regular one only, never through a link, and small
        info = json.loads(run_files.read_bounded(run_dir / protocol.EXIT_FILE, max_bytes=65536))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    return (
        f"{info.get('reason', 'stopped')} (rank exit {info.get('code')}, step {info.get('step')})"
    )[:300]  # written by the run: bounded before it reaches a 300-character column


def supervise(job_id: int) -> Outcome | None:
    """Drive job ``job_id``'s run to its end; return the outcome, None if nothing to do.

    Idempotent: it takes the run's lease first, so a duplicate delivery of the launch for
    a run that is already supervised returns None at once. With the lease: an admitted job
    is launched (``_launch``); a running or restarting one lost its supervisor (its lease
    lapsed), so its run is stopped at a checkpoint and requeued (``takeover.requeue_run``).
    """
    lease = leases.acquire(job_id)
    if lease is None:
        return None
    try:
        with draining_on_sigterm() as drain:
            job = Job.objects.get(pk=job_id)
            if job.status == JobStatus.ADMITTED:
                return _launch(job, Supervision(lease=lease, drain=drain))
            if job.status in (JobStatus.RUNNING, JobStatus.RESTARTING):
                takeover.requeue_run(job, fence=lease.fence, why="its supervisor was lost")
                return Outcome(JobStatus.QUEUED, None, "supervisor lost; requeued")
            return None
    finally:
        lease.release()


@contextmanager
def draining_on_sigterm() -> Iterator[threading.Event]:
    """Yield an event that SIGTERM sets (instead of killing this process) while inside.

    A worker shutting down SIGTERMs its pool processes; a supervisor then stops its run
    at a checkpoint and requeues the job before it exits. Outside the main thread (tests
    calling supervise directly) no handler can be installed; the event then stays unset.
    """
    drain = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield drain
        return

    def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
        drain.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield drain
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class Supervision:
    """What a supervisor checks on every heartbeat: its lease, the job's flags, SIGTERM."""

    lease: leases.Lease
    drain: threading.Event
    straggler_raised: bool = False  # a hung attempt raised an alarm; cleared on progress
    # The run's Redis user: put back on every beat if a Redis restart wiped it.
    credential: redis_acl.JobCredential | None = None
    admin: redis.Redis | None = None

    @property
    def fence(self) -> int:
        return self.lease.fence

    def beat(self) -> str | None:
        """Renew, heartbeat and read the job's flags; return why to stop, or None.

        Returns LOST, "drain", "cancel" or "preempt" (in that order of precedence).
        """
        if not self.lease.renew():
            return LOST
        if self.drain.is_set():
            return "drain"
        self._restore_credential()
        close_old_connections()
        job_heartbeat(job_id=self.lease.job_id)
        flags = (
            Job.objects.filter(pk=self.lease.job_id)
            .values("cancel_requested", "preempt_requested", "fence")
            .first()
        )
        if flags is None or flags["fence"] != self.fence:
            return LOST
        if flags["cancel_requested"]:
            return "cancel"
        return "preempt" if flags["preempt_requested"] else None

    def _restore_credential(self) -> None:
        if self.credential is None or self.admin is None:
            return
        try:
            if self.credential.restore(self.admin):
                log.warning("job %s: Redis lost the run's user; re-created it", self.lease.job_id)
        except redis.RedisError:
            pass  # Redis is still down: the next beat tries again

    def sleep(self, seconds: float) -> str | None:
        """Wait ``seconds`` while beating; return why to stop early, or None."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if why := self.beat():
                return why
            self.drain.wait(
                min(settings.SYNCLANE_HEARTBEAT_S, max(0.0, deadline - time.monotonic()))
            )
        return None


def _launch(job: Job, sup: Supervision) -> Outcome | None:
    """Run the admitted job to its end.

    Steps: 1. wait for victims to release their slots; 2. spawn torchrun and mark running;
    3. watch (heartbeat, cancel, preemption, hang, shutdown); 4. on failure back off and
    restart from the last checkpoint while the job's restarts remain; 5. record the end.
    A platform fault before the start (Redis away, the control plane unreachable or failing)
    puts the job back in the queue; a fault of the job's own (a refused bundle) fails it.
    """
    if not _wait_for_victims(job, sup):
        return _requeue_admitted(job, sup)
    try:
        run_as, code_dir = prepare_run(job)
    except BundleFetchError as exc:
        if exc.platform_fault:
            return _requeue_before_start(job, sup, f"could not fetch the job's code: {exc}")
        return _fail_before_start(job, sup, f"could not prepare the run: {exc}")
    except (ValueError, OSError) as exc:
        return _fail_before_start(job, sup, f"could not prepare the run: {exc}")
    admin = redis_clients.shared(socket_timeout=5)  # the process's pool: no connect per run
    try:
        credential = redis_acl.create_job_user(admin, job.pk, settings.REDIS_URL)
    except redis.RedisError as exc:
        return _requeue_before_start(job, sup, f"could not create the run's Redis user: {exc}")
    try:
        sup.credential, sup.admin = credential, admin
        spec = launch_spec_for(job, redis_url=credential.url, code_dir=code_dir)
        crew = Crew.for_job(job, redis_url=credential.url)
        outcome = _run(job, sup, spec, run_as, crew)
        if crew is not None and outcome is not None and outcome.status in TERMINAL:
            crew.end()
        return outcome
    finally:
        # The run's credential dies with the run (Redis closes its open connections too).
        with contextlib.suppress(redis.RedisError):
            redis_acl.delete_job_user(admin, job.pk)


def _requeue_before_start(job: Job, sup: Supervision, why: str) -> Outcome:
    """admitted -> queued: a platform fault (Redis, the control plane) is not the job's.

    The job's launch faults in a row grow by one: the scheduling pass holds it back for the
    launch back-off (SYNCLANE_LAUNCH_BACKOFF_S doubling, capped), so a fault that lasts does
    not make it spin through admit, launch, requeue.
    """
    faults = job.launch_faults + 1
    wait = adapters.options().launch_backoff_s(faults)
    log.warning(
        "job %s: %s; back to the queue (launch fault %d, %.0f s back-off)",
        job.pk,
        why,
        faults,
        wait,
    )
    # The cause goes last: it may be long, and the reason column keeps 300 characters.
    reason = f"back to the queue, retried in {wait:.0f} s at the earliest: {why}"[:300]
    state.transition(
        job,
        JobStatus.QUEUED,
        reason=reason,
        fence=sup.fence,
        launch_faults=F("launch_faults") + 1,
        launch_fault_at=timezone.now(),
    )
    request_schedule()
    return Outcome(JobStatus.QUEUED, None, reason)


def _fail_before_start(job: Job, sup: Supervision, reason: str) -> Outcome:
    log.warning("job %s: %s", job.pk, reason)
    reason = reason[:300]
    state.transition(job, JobStatus.FAILED, reason=reason, fence=sup.fence, exit_reason=reason)
    request_schedule()
    return Outcome(JobStatus.FAILED, None, reason)


# Placement keys written by the scheduler that a run keeps: where each rank runs and why.
_KEPT_PLACEMENT = ("nodes", "why")


def _run(
    job: Job,
    sup: Supervision,
    spec: LaunchSpec,
    run_as: isolation.RunAs | None,
    crew: Crew | None = None,
) -> Outcome | None:
    """Steps 2-5 of ``_launch``: spawn, watch, restart, record the end.

    With a ``crew`` (a run across nodes) each attempt is announced to the other nodes
    first, and the job is running once every node has spawned its torchrun.
    """
    uid, gid = (run_as.uid, run_as.gid) if run_as else (None, None)
    resumed_from = latest_checkpoint_step(job.run_dir)
    placement = {
        **{key: job.placement[key] for key in _KEPT_PLACEMENT if key in job.placement},
        "node": node_name(),
        "ranks": spec.nproc_per_node if crew is None else crew.parts[0].nproc,
        "resumed_from": resumed_from,
    }
    reason = "started" if resumed_from is None else f"resumed from step {resumed_from}"
    expected = JobStatus.ADMITTED
    while True:
        (spec.run_dir / protocol.EXIT_FILE).unlink(missing_ok=True)
        log_mark = failure.log_size(spec.run_dir)
        try:
            attempt = crew.begin(spec, fence=sup.fence) if crew else spec
        except (OSError, redis.RedisError) as exc:
            return _requeue_unstarted(job, sup, f"could not start the run across nodes: {exc}")
        argv, env = build_command(attempt), build_env(attempt, os.environ)
        proc = process.spawn(argv, env=env, run_dir=spec.run_dir, cwd=spec.cwd, uid=uid, gid=gid)
        placement["pgid"] = proc.pid
        if crew is not None:
            placement.update(crew.placement())
            if (held := crew.wait_started(sup.beat, proc)) is not None:
                return _stop_unstarted(job, sup, proc, crew, held)
        job = state.transition(
            job,
            JobStatus.RUNNING,
            reason=reason,
            expected=expected,
            fence=sup.fence,
            placement=placement,
            resumed_from_step=latest_checkpoint_step(spec.run_dir),
            launch_faults=0,  # it started: a later launch fault backs off from the base again
        )
        outcome = _watch(job, proc, sup, log_mark=log_mark, crew=crew)
        if outcome.status == LOST:
            return outcome  # the new holder drives the run now: touch nothing
        if crew is not None:
            crew.stop(outcome.reason)  # before any transition: a readmission announces anew
        process.reap(spec.run_dir)
        job.refresh_from_db()
        checkpoint = latest_checkpoint_step(spec.run_dir)
        if outcome.status == JobStatus.FAILED and job.restarts < job.restart_limit:
            job = state.transition(
                job,
                JobStatus.RESTARTING,
                reason=f"{outcome.reason}; restarting from step {checkpoint or 0}",
                fence=sup.fence,
                restarts=job.restarts + 1,
                exit_code=outcome.exit_code,
                checkpoint_step=checkpoint,
            )
            if why := sup.sleep(restart_backoff_s(job.restarts)):
                return _stop_while_restarting(job, sup, why, checkpoint)
            reason = f"restarted (attempt {job.restarts}) from step {checkpoint or 0}"
            expected = JobStatus.RESTARTING
            continue
        if outcome.status == JobStatus.PREEMPTED:
            _requeue(job, outcome, checkpoint, sup)
            return outcome
        if outcome.status == JobStatus.QUEUED:
            takeover.requeue(job, fence=sup.fence, why=outcome.reason, checkpoint=checkpoint)
            return outcome
        state.transition(
            job,
            outcome.status,
            reason=outcome.reason,
            fence=sup.fence,
            exit_code=outcome.exit_code,
            exit_reason=outcome.reason,
            checkpoint_step=checkpoint,
        )
        request_schedule()  # slots were freed
        return outcome


def _requeue_unstarted(job: Job, sup: Supervision, why: str) -> Outcome:
    """admitted/restarting -> queued: a run across nodes could not be announced."""
    log.warning("job %s: %s; back to the queue", job.pk, why)
    job.refresh_from_db()
    takeover.requeue(job, fence=sup.fence, why=why, checkpoint=latest_checkpoint_step(job.run_dir))
    return Outcome(JobStatus.QUEUED, None, why)


def _stop_unstarted(
    job: Job,
    sup: Supervision,
    proc: subprocess.Popen[bytes],
    crew: Crew,
    held: str | tuple[str, int | None, str],
) -> Outcome:
    """Not every node started this attempt: stop the ones that did, settle the job.

    ``held`` is a stop reason of the beat (cancel, preempt, drain, lost lease) or a
    verdict (a node that did not start: back to the queue).
    """
    why = held if isinstance(held, str) else held[2]
    crew.stop(why)
    _terminate(proc, sup)
    process.reap(job.run_dir)
    if why == LOST:
        return Outcome(LOST, None, "lease lost")
    job.refresh_from_db()
    checkpoint = latest_checkpoint_step(job.run_dir)
    if isinstance(held, str):
        return _stop_while_restarting(job, sup, held, checkpoint)
    takeover.requeue(job, fence=sup.fence, why=why, checkpoint=checkpoint)
    return Outcome(JobStatus.QUEUED, None, why)


def restart_backoff_s(attempt: int) -> float:
    """Seconds to wait before restart ``attempt`` (1, 2, ...): doubling, capped."""
    base = settings.SYNCLANE_RESTART_BACKOFF_S * 2 ** max(0, attempt - 1)
    return float(min(base, settings.SYNCLANE_RESTART_BACKOFF_MAX_S))


def _stop_while_restarting(job: Job, sup: Supervision, why: str, checkpoint: int | None) -> Outcome:
    """A stop request arrived during the restart backoff: no run is alive to stop."""
    if why == LOST:
        return Outcome(LOST, None, "lease lost")
    if why == "cancel":
        state.transition(job, JobStatus.CANCELLED, reason="cancelled by user", fence=sup.fence)
        request_schedule()
        return Outcome(JobStatus.CANCELLED, None, "cancelled by user")
    # Drained or preempted: back to the queue, to resume from the checkpoint.
    takeover.requeue(job, fence=sup.fence, why=_STOP_REASONS[why], checkpoint=checkpoint)
    return Outcome(JobStatus.QUEUED, None, _STOP_REASONS[why])


_STOP_REASONS = {"drain": "worker shutting down", "preempt": "preempted"}


def _requeue_admitted(job: Job, sup: Supervision) -> Outcome | None:
    """Stopped before launching (shutdown or lease lost): admitted -> queued."""
    if sup.drain.is_set():
        job.refresh_from_db()
        try:
            state.transition(
                job,
                JobStatus.QUEUED,
                reason="worker shutting down before launch; back to the queue",
                fence=sup.fence,
            )
        except state.TransitionError:
            return None
        request_schedule()
        return Outcome(JobStatus.QUEUED, None, "worker shutting down")
    return None


def _requeue(job: Job, outcome: Outcome, checkpoint: int | None, sup: Supervision) -> None:
    """running -> preempted -> queued, keeping the checkpoint to resume from."""
    job = state.transition(
        job,
        JobStatus.PREEMPTED,
        reason=f"preempted; checkpoint at step {checkpoint or 0}",
        fence=sup.fence,
        exit_code=outcome.exit_code,
        checkpoint_step=checkpoint,
        preempt_requested=False,
        allocation_mbps=None,
    )
    state.transition(
        job,
        JobStatus.QUEUED,
        reason=f"requeued; resumes from step {checkpoint or 0}",
        fence=sup.fence,
    )
    request_schedule()


def _wait_for_victims(job: Job, sup: Supervision) -> bool:
    """Hold the launch until the jobs this admission preempts have released their slots.

    Bounded: a victim that does not stop within its grace period (plus slack) is not
    allowed to block the admitted job forever. Returns False if the launch must not go
    ahead (the worker is shutting down, or the lease was lost).
    """
    victims = job.placement.get("waits_for") or []
    deadline = time.monotonic() + settings.SYNCLANE_CANCEL_GRACE_S + 30
    next_beat = 0.0
    while victims and time.monotonic() < deadline:
        if not Job.objects.filter(pk__in=victims, status__in=ACTIVE).exists():
            return True
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + settings.SYNCLANE_HEARTBEAT_S
            if sup.beat() in (LOST, "drain"):
                return False
        time.sleep(POLL_S)
    if victims:
        log.warning("job %s: launching although victims %s still hold slots", job.pk, victims)
    return not sup.drain.is_set()


def _watch(
    job: Job,
    proc: subprocess.Popen[bytes],
    sup: Supervision,
    *,
    log_mark: int,
    crew: Crew | None = None,
) -> Outcome:
    """Poll the run until it ends or must be stopped; heartbeat meanwhile.

    Returns what happened to this attempt (succeeded, failed, cancelled, preempted,
    queued by a shutdown, or LOST); whether a failed attempt is restarted is the
    caller's decision. A run with no new step for SYNCLANE_HANG_TIMEOUT_S raises a
    straggler alarm and is stopped as failed. A failed run's reason names the rank that
    failed first, its exit code or signal and its last log lines (from ``log_mark`` on).
    With a ``crew``, another node's end (failed, shutting down, lost) ends this attempt
    too: this node's ranks are stopped at a checkpoint (see ``Crew.check``).
    """
    # The first beat waits a moment (far inside the lease's TTL): a run that ends by then (a
    # short job, a script that fails at start-up) costs no beat and no progress query.
    next_beat = time.monotonic() + min(FIRST_BEAT_S, settings.SYNCLANE_HEARTBEAT_S)
    progress: _Progress | None = None
    while True:
        code = proc.poll()
        if code is not None:
            ended = _ended(job, code, log_mark)
            if crew is None:
                return Outcome(*ended)
            settled = crew.settle(ended, sup.beat)
            return (
                Outcome(LOST, None, "lease lost") if isinstance(settled, str) else Outcome(*settled)
            )
        now = time.monotonic()
        if now >= next_beat:
            next_beat = now + settings.SYNCLANE_HEARTBEAT_S
            why = sup.beat()
            if why == LOST:
                log.warning("job %s: lease lost; leaving the run to its new supervisor", job.pk)
                return Outcome(LOST, None, "lease lost")
            progress = progress or _Progress(job.pk)
            moved = why is None and progress.moved()
            if moved and sup.straggler_raised:
                failure.clear_straggler_alarms(job)  # the restarted run makes steps again
                sup.straggler_raised = False
            if why is None and (stalled := progress.stalled_s()) is not None:
                failure.raise_straggler_alarm(job, stalled_s=stalled)
                sup.straggler_raised = True
                code = _terminate(proc, sup)
                return Outcome(JobStatus.FAILED, code, f"hung: no step for {stalled:.0f} s")
            if why is not None:
                if crew is not None:
                    crew.stop(why)
                # SIGTERM first: the workload writes a checkpoint and exits.
                code = _terminate(proc, sup)
                return _STOPPED[why](code)
            if crew is not None and (verdict := crew.check()) is not None:
                crew.stop(verdict[2])
                _terminate(proc, sup)
                return Outcome(*verdict)
        # Until the next beat, or the run's end, whichever comes first.
        process.wait_exit(proc, max(0.0, next_beat - time.monotonic()))


def _terminate(proc: subprocess.Popen[bytes], sup: Supervision) -> int:
    """Stop the run (SIGTERM, SIGKILL after the grace) holding the lease; return its code."""
    with leases.kept(sup.lease):
        return process.terminate_group(proc, grace_s=settings.SYNCLANE_CANCEL_GRACE_S)


def _ended(job: Job, code: int, log_mark: int) -> tuple[str, int | None, str]:
    """How this node's torchrun ended with exit status ``code``: (status, code, reason)."""
    if code == 0:
        return (JobStatus.SUCCEEDED, 0, "finished")
    reason = worker_exit_reason(Path(job.run_dir)) or f"torchrun exited with code {code}"
    return (JobStatus.FAILED, code, failure.describe(job.run_dir, reason, since=log_mark))


_STOPPED = {
    "cancel": lambda code: Outcome(JobStatus.CANCELLED, code, "cancelled by user"),
    "preempt": lambda code: Outcome(JobStatus.PREEMPTED, code, "preempted"),
    "drain": lambda code: Outcome(JobStatus.QUEUED, code, "worker shutting down"),
}


class _Progress:
    """Tells a hung run: the newest stored metric sample has not changed for too long."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.newest: int | None = self._newest()
        self.since = time.monotonic()

    def _newest(self) -> int | None:
        rows = MetricSample.objects.filter(job_id=self.job_id).order_by("-id")
        return rows.values_list("id", flat=True).first()

    def moved(self) -> bool:
        """Look for a new step; True if there was one since the last look."""
        newest = self._newest()
        if newest == self.newest:
            return False
        self.newest, self.since = newest, time.monotonic()
        return True

    def stalled_s(self) -> float | None:
        """Seconds without a new step (as of the last ``moved()``) past the hang timeout, else None."""
        stalled = time.monotonic() - self.since
        return stalled if stalled >= settings.SYNCLANE_HANG_TIMEOUT_S else None
