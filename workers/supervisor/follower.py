"""Node rank i > 0 of a run across nodes: start and stop this node's ranks when told.

    supervise_part(job_id, node_rank)   # the launch_job task for node rank i > 0

Node rank 0's supervisor drives the job (``run.py`` with a ``Crew``): it announces each
attempt (``gang.py``), and this supervisor spawns this node's torchrun for it, reports
``started``, then ``exited`` with its code, and stops its ranks (SIGTERM: checkpoint,
exit) when node rank 0 announces a stop or a new attempt. It writes no job state: it
follows the job until the job leaves admitted/running/restarting, or its placement no
longer puts this node at this node rank. On SIGTERM (its worker shutting down) it reports
``drain``; node rank 0 then stops the whole run at a checkpoint and requeues it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import redis
from django.conf import settings
from django.db import close_old_connections

from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from workers.supervisor import failure, gang, isolation, process
from workers.supervisor import lease as leases
from workers.supervisor.bundles import BundleFetchError
from workers.supervisor.command import build_command, build_env
from workers.supervisor.crew import part_spec
from workers.supervisor.identity import node_name
from workers.supervisor.run import (
    draining_on_sigterm,
    launch_spec_for,
    prepare_run,
    worker_exit_reason,
)

log = logging.getLogger(__name__)

POLL_S = 0.25
# The job states in which a node of a run across nodes has ranks to run (or soon will).
FOLLOWED = frozenset({JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.RESTARTING})


def supervise_part(job_id: int, node_rank: int) -> str | None:
    """Run node rank ``node_rank``'s part of job ``job_id`` until the job moves on.

    Returns why it stopped following ("succeeded", "queued", ..., "moved", "drain",
    "lost"), or None if another supervisor holds this part (a duplicate delivery).
    """
    lease = _acquire(job_id, node_rank)
    if lease is None:
        return None
    try:
        with draining_on_sigterm() as drain:
            return _Follower(job_id, node_rank, lease, drain).follow()
    finally:
        lease.release()


def _acquire(job_id: int, node_rank: int) -> leases.Lease | None:
    """The part's lease, waiting up to a lease lifetime for a holder that is ending.

    A job requeued and readmitted at once sends a new launch while the previous run's
    supervisor of this part may still be winding down; a duplicate of a live part gives up.
    """
    deadline = time.monotonic() + settings.SYNCLANE_LEASE_TTL_S
    while True:
        lease = leases.acquire_part(job_id, node_rank)
        if lease is not None or time.monotonic() >= deadline:
            return lease
        time.sleep(POLL_S)


@dataclass
class _Running:
    run_id: str
    proc: subprocess.Popen[bytes]
    log_mark: int


class _Follower:
    def __init__(
        self, job_id: int, node_rank: int, lease: leases.Lease, drain: threading.Event
    ) -> None:
        self.job_id, self.node_rank, self.lease, self.drain = job_id, node_rank, lease, drain
        self.node = node_name()
        self.tag = f".node{node_rank}"
        self.running: _Running | None = None
        self.served = ""  # the last attempt this node started (or refused)
        self.drained = ""  # the last attempt this node reported its drain for
        self.drain_deadline: float | None = None
        self.prepared: tuple[isolation.RunAs | None, Path | None] | None = None
        self.run_dir = Path()  # the job's (shared) run folder, known once it starts

    def follow(self) -> str:
        next_beat = 0.0
        while True:
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + settings.SYNCLANE_HEARTBEAT_S
                if (done := self._beat()) is not None:
                    self._stop("the job moved on")
                    return done
            self._step()
            time.sleep(POLL_S)

    def _beat(self) -> str | None:
        """Renew the lease and re-read the job; return why to stop following, or None."""
        if not self.lease.renew():
            return "lost"
        close_old_connections()
        job = Job.objects.filter(pk=self.job_id).first()
        if job is None:
            return "gone"
        if job.status not in FOLLOWED:
            return str(job.status)
        part = gang.part_of(job, self.node_rank)
        if part is None or part.node != self.node:
            return "moved"
        if self.drain.is_set() and self.drain_deadline is None:
            # Let node rank 0 stop the whole run at a checkpoint, but not forever.
            self.drain_deadline = time.monotonic() + settings.SYNCLANE_CANCEL_GRACE_S + 10
        if self.drain_deadline is not None and time.monotonic() >= self.drain_deadline:
            return "drain"
        return None

    def _step(self) -> None:
        """One look: this node's torchrun ended? A stop or a new attempt announced?"""
        try:
            attempt = gang.current(self.job_id)
        except redis.RedisError:
            return
        if self.running is not None:
            self._watch(attempt)
        if self.drain_deadline is not None:
            if attempt is not None and attempt.run_id != self.drained:
                self._report(attempt.run_id, gang.DRAIN, detail="worker shutting down")
                self.served = self.drained = attempt.run_id
            return
        # Start once node rank 0's torchrun hosts the rendezvous; until then, look again.
        if (
            self.running is None
            and attempt is not None
            and self._is_new(attempt)
            and gang.rendezvous_open(attempt.endpoint)
        ):
            self._start(attempt)

    def _is_new(self, attempt: gang.Attempt) -> bool:
        if attempt.state != gang.START or attempt.run_id == self.served:
            return False
        fence = Job.objects.filter(pk=self.job_id).values_list("fence", flat=True).first()
        # Only the current driver's attempts: its fence is in the run id.
        return attempt.run_id.startswith(f"synclane-{self.job_id}-{fence}-")

    def _watch(self, attempt: gang.Attempt | None) -> None:
        assert self.running is not None
        code = self.running.proc.poll()
        if code is None and (
            attempt is None or attempt.run_id != self.running.run_id or attempt.state == gang.STOP
        ):
            self._stop("node rank 0 stopped the attempt")
            return
        if code is not None:
            self._ended(code)

    def _start(self, attempt: gang.Attempt) -> None:
        self.served = attempt.run_id
        job = Job.objects.get(pk=self.job_id)
        part = gang.part_of(job, self.node_rank)
        assert part is not None
        try:
            if self.prepared is None:
                self.prepared = prepare_run(job, code_folder=f"code-node{self.node_rank}")
        except (BundleFetchError, ValueError, OSError) as exc:
            self._report(attempt.run_id, gang.EXITED, code=1, detail=f"could not prepare: {exc}")
            return
        run_as, code_dir = self.prepared
        self.run_dir = Path(job.run_dir)
        spec = launch_spec_for(job, redis_url=attempt.redis_url, code_dir=code_dir)
        spec = replace(spec, gang=part_spec(attempt, part))
        log_mark = failure.log_size(job.run_dir, self._log_name)
        proc = process.spawn(
            build_command(spec),
            env=build_env(spec, os.environ),
            run_dir=job.run_dir,
            cwd=spec.cwd,
            tag=self.tag,
            uid=run_as.uid if run_as else None,
            gid=run_as.gid if run_as else None,
        )
        self.running = _Running(attempt.run_id, proc, log_mark)
        log.info("job %s: node rank %s started %s", self.job_id, self.node_rank, attempt.run_id)
        self._report(attempt.run_id, gang.STARTED, pgid=proc.pid)

    @property
    def _log_name(self) -> str:
        return f"torchrun{self.tag}.log"

    def _stop(self, why: str) -> None:
        if self.running is None:
            return
        log.info("job %s: node rank %s stops its ranks: %s", self.job_id, self.node_rank, why)
        with leases.kept(self.lease):  # else node rank 0 would take this node for lost
            code = process.terminate_group(
                self.running.proc, grace_s=settings.SYNCLANE_CANCEL_GRACE_S
            )
        self._ended(code)

    def _ended(self, code: int) -> None:
        assert self.running is not None
        run_dir = self.run_dir
        process.reap(run_dir, self.tag)
        reason = worker_exit_reason(run_dir) or f"torchrun exited with code {code}"
        detail = failure.describe(
            run_dir, reason, since=self.running.log_mark, log_name=self._log_name
        )
        self._report(self.running.run_id, gang.EXITED, code=code, detail=detail[:300])
        self.running = None

    def _report(
        self,
        run_id: str,
        state: str,
        *,
        code: int | None = None,
        pgid: int | None = None,
        detail: str = "",
    ) -> None:
        report = gang.Report(run_id, state, self.node, code=code, pgid=pgid, detail=detail)
        with contextlib.suppress(redis.RedisError):
            gang.report(self.job_id, self.node_rank, report)
