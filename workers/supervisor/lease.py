"""One supervisor per run: a lease in Redis and a fencing token on the job row.

    lease = acquire(job_id)      # None: another supervisor holds the run
    lease.renew()                # every heartbeat; False once someone else took it over
    state.transition(job, to, reason=..., fence=lease.fence)
    lease.release()

The lease (``synclane:lease:<job>``, value ``host:pid:nonce``, expires after
``SYNCLANE_LEASE_TTL_S``) says who drives the run now; a worker that dies stops renewing
it, and once it has lapsed the reconciler (or a redelivered launch) may take the run over.
A lapsed lease alone cannot stop a supervisor that is merely slow, so every take-over also
bumps ``Job.fence`` in the database, and every transition a supervisor makes requires its
own fence in the conditional UPDATE (``transition(..., fence=)``): the old holder's writes
then touch no row. The database, not Redis, keeps the token, so a Redis restart cannot make
it go backwards.

A run across nodes has one lease per node rank: node rank 0 holds the job's lease (and
fence) and drives the job; node rank i > 0 holds ``synclane:lease:<job>:<i>``
(``acquire_part``), which only makes a duplicate launch for that node harmless and tells
the driver that node's supervisor is alive. It bumps no fence: it writes no job state.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import connection
from django.db.models import F

from controlplane.jobs.models import Job
from controlplane.lib import redis_clients

log = logging.getLogger(__name__)

KEY_PREFIX = "synclane:lease:"

# Renew only our own lease; re-create it if it vanished (a Redis restart), never steal it.
# Returns 1 renewed, 2 re-created, 0 held by someone else.
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_key(job_id: int, node_rank: int = 0) -> str:
    return f"{KEY_PREFIX}{job_id}" if node_rank == 0 else f"{KEY_PREFIX}{job_id}:{node_rank}"


def _client() -> redis.Redis:
    return redis_clients.shared(socket_timeout=5, decode_responses=True)


def _ttl_ms() -> int:
    return max(1, int(settings.SYNCLANE_LEASE_TTL_S * 1000))


@dataclass(frozen=True)
class Lease:
    """A held lease: ``owner`` is the value in Redis, ``fence`` the token on the job row."""

    job_id: int
    owner: str
    fence: int
    node_rank: int = 0  # > 0: a follower node's part of a run across nodes (no fence)

    @property
    def key(self) -> str:
        return lease_key(self.job_id, self.node_rank)

    def renew(self) -> bool:
        """Extend the lease; return False only if another supervisor holds it now.

        Redis being unreachable is not a loss (True, with a warning): the fence in the
        database still guards every write.
        """
        try:
            result = _client().eval(_RENEW, 1, self.key, self.owner, _ttl_ms())
        except redis.RedisError:
            log.warning("job %s: could not renew the supervisor lease", self.job_id, exc_info=True)
            return True
        if result == 0:
            return False
        if self.node_rank:
            return True  # a part lease guards no job state: re-created is still ours
        # A re-created lease is ours only if nobody took the run over meanwhile.
        return result == 1 or Job.objects.filter(pk=self.job_id, fence=self.fence).exists()

    def release(self) -> None:
        """Drop the lease if it is still ours (best effort: it expires anyway)."""
        try:
            _client().eval(_RELEASE, 1, self.key, self.owner)
        except redis.RedisError:
            log.warning("job %s: could not release the supervisor lease", self.job_id)


@contextmanager
def kept(lease: Lease) -> Iterator[None]:
    """Renew ``lease`` from a thread, every heartbeat, while the caller blocks.

    Stopping a run waits up to SYNCLANE_CANCEL_GRACE_S for its ranks to checkpoint, which
    may be longer than the lease lives: without this the reconciler would take the run
    over meanwhile and the stop's own transition would find a new fence.
    """
    done = threading.Event()

    def renew() -> None:
        try:
            while not done.wait(settings.SYNCLANE_HEARTBEAT_S):
                lease.renew()
        finally:
            connection.close()  # renew() may have opened this thread's own connection

    thread = threading.Thread(target=renew, name=f"lease-{lease.key}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def new_owner() -> str:
    """``host:pid:nonce``: which process holds a lease (the pid lets a worker signal it)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def acquire(job_id: int) -> Lease | None:
    """Take the run's lease and a new fencing token; None if another supervisor holds it.

    Raises redis.RedisError when Redis is unreachable (nobody can be sure to hold it then).
    """
    owner = new_owner()
    if not _client().set(lease_key(job_id), owner, nx=True, px=_ttl_ms()):
        return None
    if not Job.objects.filter(pk=job_id).update(fence=F("fence") + 1):
        Lease(job_id, owner, 0).release()
        return None
    fence = Job.objects.values_list("fence", flat=True).get(pk=job_id)
    return Lease(job_id, owner, int(fence))


def acquire_part(job_id: int, node_rank: int) -> Lease | None:
    """Take node rank ``node_rank``'s (> 0) lease of a run across nodes; None if held.

    Raises redis.RedisError when Redis is unreachable.
    """
    if node_rank < 1:
        raise ValueError("node rank 0 takes the job's lease: acquire()")
    owner = new_owner()
    if not _client().set(lease_key(job_id, node_rank), owner, nx=True, px=_ttl_ms()):
        return None
    return Lease(job_id, owner, 0, node_rank)


def holder(job_id: int, node_rank: int = 0) -> str | None:
    """The owner string of the run's (or node rank's) lease, or None if nobody holds it."""
    value = _client().get(lease_key(job_id, node_rank))
    return str(value) if value is not None else None


def held_by_this_host() -> Iterator[tuple[int, int]]:
    """(job id, supervisor pid) of every lease held by a process of this host.

    Part leases (``<job>:<node rank>``) count too: their supervisors drain the same way.
    """
    client = _client()
    host = socket.gethostname()
    for key in client.scan_iter(match=f"{KEY_PREFIX}*"):
        value = client.get(key)
        parts = str(value).rsplit(":", 2) if value else []
        job = str(key).removeprefix(KEY_PREFIX).split(":", 1)[0]
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit() and job.isdigit():
            yield int(job), int(parts[1])
