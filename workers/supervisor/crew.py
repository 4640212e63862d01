"""Node rank 0's side of a run across nodes: start, watch and stop the other nodes.

    crew = Crew.for_job(job, redis_url=...)   # None: the job runs on this node alone
    spec = crew.begin(spec, fence=...)         # new attempt: pick a port, announce it
    crew.wait_started(beat, proc)              # every node's torchrun spawned (or why not)
    crew.check()                               # each beat: a node failed, drains or is lost?
    crew.settle(own)                           # this node's torchrun ended: what happened
    crew.stop(why); crew.end()

Node rank 0's supervisor drives the job (``run.py``) and uses a Crew for the rest; the
other nodes run ``follower.py``. See ``gang.py`` for what they say to each other.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

import redis
from django.conf import settings

from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from workers.supervisor import gang
from workers.supervisor import lease as leases
from workers.supervisor.command import GangPart, LaunchSpec

log = logging.getLogger(__name__)

POLL_S = 0.25
# (status, exit code, reason): what ``run.Outcome`` is made of.
Verdict = tuple[str, int | None, str]


class Crew:
    """The other nodes of one run, seen from node rank 0."""

    def __init__(self, job_id: int, parts: list[gang.Part], redis_url: str) -> None:
        self.job_id = job_id
        self.parts = parts
        self.redis_url = redis_url
        self.attempts = 0
        self.attempt: gang.Attempt | None = None

    @classmethod
    def for_job(cls, job: Job, *, redis_url: str) -> Crew | None:
        """The crew of a job placed on several nodes; None for a run on one node."""
        parts = [p for i in range(len(gang.nodes_of(job))) if (p := gang.part_of(job, i))]
        return cls(job.pk, parts, redis_url) if len(parts) > 1 else None

    @property
    def followers(self) -> list[gang.Part]:
        return self.parts[1:]

    @property
    def endpoint(self) -> str:
        return self.attempt.endpoint if self.attempt else ""

    def begin(self, spec: LaunchSpec, *, fence: int) -> LaunchSpec:
        """Announce a new attempt (fresh port and run id); return this node's launch of it.

        Raises OSError if no rendezvous port is free, redis.RedisError if Redis is away.
        """
        self.attempts += 1
        lead = self.parts[0]
        self.attempt = gang.Attempt(
            run_id=gang.run_id(self.job_id, fence, self.attempts),
            endpoint=f"{lead.address}:{gang.rendezvous_port()}",
            nnodes=len(self.parts),
            redis_url=self.redis_url,
        )
        gang.announce(self.job_id, self.attempt)
        return replace(spec, gang=part_spec(self.attempt, lead))

    def wait_started(
        self, beat: Callable[[], str | None], proc: subprocess.Popen[bytes]
    ) -> Verdict | str | None:
        """Wait until every other node has spawned this attempt's torchrun.

        Returns None when they all did (or this node's torchrun already ended: the watch
        tells what happened), a ``beat()`` stop reason (str), or a verdict: the nodes that
        did not start within SYNCLANE_LAUNCH_TIMEOUT_S are lost and the job is requeued.
        """
        deadline = time.monotonic() + settings.SYNCLANE_LAUNCH_TIMEOUT_S
        next_beat = 0.0
        while (missing := self._not_started()) and proc.poll() is None:
            if time.monotonic() >= deadline:
                names = ", ".join(p.node for p in missing)
                return (JobStatus.QUEUED, None, f"node {names} did not start its ranks")
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + settings.SYNCLANE_HEARTBEAT_S
                if why := beat():
                    return why
            time.sleep(POLL_S)
        return None

    def _not_started(self) -> list[gang.Part]:
        run_id = self.attempt.run_id if self.attempt else ""
        said = _reports(self.job_id)
        return [p for p in self.followers if getattr(said.get(p.node_rank), "run_id", "") != run_id]

    def check(self) -> Verdict | None:
        """What ended this attempt on another node, if anything: lost, drains, failed.

        A lost node (its supervisor's lease lapsed) requeues the job, as does a node whose
        worker shuts down; a node whose torchrun failed fails the attempt (restarted from
        the checkpoint while restarts remain).
        """
        said = _reports(self.job_id)
        run_id = self.attempt.run_id if self.attempt else ""
        for part in self.followers:
            if _lost(self.job_id, part):
                return (JobStatus.QUEUED, None, f"node {part.node} lost")
        for part in self.followers:
            got = said.get(part.node_rank)
            if got is None or got.run_id != run_id:
                continue
            if got.state == gang.DRAIN:
                return (JobStatus.QUEUED, None, f"node {part.node} shutting down")
            if got.state == gang.EXITED and got.code:
                return (JobStatus.FAILED, got.code, f"node {part.node}: {got.detail}"[:300])
        return None

    def settle(self, own: Verdict, beat: Callable[[], str | None]) -> Verdict | str:
        """This node's torchrun ended with ``own``: the run's outcome, all nodes considered.

        A success stands. A failure here may be the echo of another node's end (its ranks
        vanished mid-collective), so wait until each other node has said how its attempt
        ended or is known lost (at most a lease lifetime plus the cancel grace) and prefer
        its cause: lost or draining requeue the job, a node's failure names that node.
        ``beat()`` keeps the job's lease meanwhile; its LOST ("lost") is returned as is.
        """
        if own[0] == JobStatus.SUCCEEDED:
            return own
        deadline = (
            time.monotonic() + settings.SYNCLANE_LEASE_TTL_S + settings.SYNCLANE_CANCEL_GRACE_S
        )
        next_beat = time.monotonic() + settings.SYNCLANE_HEARTBEAT_S
        while time.monotonic() < deadline and not self._all_ended():
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + settings.SYNCLANE_HEARTBEAT_S
                if beat() == "lost":
                    return "lost"
            time.sleep(POLL_S)
        return self.check() or own

    def _all_ended(self) -> bool:
        said = _reports(self.job_id)
        run_id = self.attempt.run_id if self.attempt else ""
        for part in self.followers:
            got = said.get(part.node_rank)
            ended = got is not None and got.run_id == run_id and got.state != gang.STARTED
            if not ended and not _lost(self.job_id, part):
                return False
        return True

    def stop(self, why: str) -> None:
        """Tell the other nodes to stop this attempt's ranks (SIGTERM: checkpoint, exit)."""
        if self.attempt is None:
            return
        if self.attempt.state == gang.STOP:
            return
        self.attempt = replace(self.attempt, state=gang.STOP, why=why)
        try:
            gang.announce_stop(self.job_id, self.attempt)
        except redis.RedisError:
            log.warning("job %s: could not tell the other nodes to stop", self.job_id)

    def end(self) -> None:
        """The job ended for good: let the other nodes' ranks end, then forget the run."""
        if self.attempt is None:
            return
        self.stop("the run ended")
        deadline = time.monotonic() + settings.SYNCLANE_CANCEL_GRACE_S
        while time.monotonic() < deadline and not self._all_ended():
            time.sleep(POLL_S)
        with contextlib.suppress(redis.RedisError):  # else the hash expires on its own
            gang.forget(self.job_id, self.attempt.run_id)

    def placement(self) -> dict[str, object]:
        """What Job.placement adds for a run across nodes: the rendezvous it uses."""
        return {"rdzv": self.endpoint, "nnodes": len(self.parts)}


def part_spec(attempt: gang.Attempt, part: gang.Part) -> GangPart:
    """torchrun's view of ``part`` in ``attempt``."""
    return GangPart(
        nnodes=attempt.nnodes,
        node_rank=part.node_rank,
        nproc=part.nproc,
        endpoint=attempt.endpoint,
        run_id=attempt.run_id,
        local_addr=part.address,
        join_timeout_s=max(60, int(settings.SYNCLANE_LAUNCH_TIMEOUT_S * 2)),
    )


def _reports(job_id: int) -> dict[int, gang.Report]:
    try:
        return gang.reports(job_id)
    except redis.RedisError:
        return {}  # Redis away: nothing new this beat


def _lost(job_id: int, part: gang.Part) -> bool:
    """True if node ``part``'s supervisor holds no lease on its part of the run."""
    try:
        return leases.holder(job_id, part.node_rank) is None
    except redis.RedisError:
        return False  # Redis away is no proof the node is gone
