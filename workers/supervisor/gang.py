"""A run across nodes: what its supervisors tell each other, through Redis.

    part = gang.part_of(job, node_rank)       # this node's entry of Job.placement["nodes"]
    gang.announce(job_id, attempt)             # node rank 0: start (or stop) an attempt
    gang.current(job_id)                       # every node: the attempt to run now
    gang.report(job_id, node_rank, report)     # every node: started / exited / drain
    gang.reports(job_id)                       # node rank 0: what each node said

One hash per job, ``synclane:gang:<job>``: field ``attempt`` is node rank 0's announcement
(the attempt id, the rendezvous endpoint, start or stop), field ``node:<i>`` node rank i's
report about that attempt. Node rank 0 alone drives the job's state (it holds the job's
lease and fence); the other nodes only start and stop their torchrun when it says so, and
report what their torchrun did. The hash expires a day after its last write, and node rank
0 deletes it when the run ends.

The rendezvous port: node rank 0 binds a free port on all interfaces (any free port, or the
first free one of ``SYNCLANE_RDZV_PORTS=lo-hi`` where a firewall lets only those through),
releases it, and announces ``address:port``; its torchrun binds it a moment later. A new
port for every attempt: an agent left over from an earlier attempt cannot join a later one.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

import redis
from django.conf import settings

from controlplane.jobs.models import Job

KEY_PREFIX = "synclane:gang:"
KEY_TTL_S = 24 * 3600
START, STOP = "start", "stop"
STARTED, EXITED, DRAIN = "started", "exited", "drain"


def nodes_of(job: Job) -> list[dict[str, Any]]:
    """The job's placed nodes in node-rank order; [] for a job run on one node."""
    nodes = job.placement.get("nodes") if isinstance(job.placement, dict) else None
    return list(nodes) if isinstance(nodes, list) and len(nodes) > 1 else []


@dataclass(frozen=True)
class Part:
    """Node rank ``node_rank``'s share of a run across ``nnodes`` nodes."""

    node_rank: int
    nnodes: int
    node: str
    address: str
    nproc: int


def part_of(job: Job, node_rank: int) -> Part | None:
    """Node rank ``node_rank``'s part of the job's placement; None if it has none."""
    nodes = nodes_of(job)
    if not 0 <= node_rank < len(nodes):
        return None
    entry = nodes[node_rank]
    return Part(
        node_rank=node_rank,
        nnodes=len(nodes),
        node=str(entry.get("node", "")),
        address=str(entry.get("address") or "127.0.0.1"),
        nproc=len(entry.get("ranks") or []),
    )


@dataclass(frozen=True)
class Attempt:
    """Node rank 0's announcement: run attempt ``run_id`` (or stop it)."""

    run_id: str
    endpoint: str
    nnodes: int
    redis_url: str  # the run's own Redis credential, for every node's ranks
    state: str = START
    why: str = ""


@dataclass(frozen=True)
class Report:
    """Node rank i's word on attempt ``run_id``: started, exited (with its code), drain."""

    run_id: str
    state: str
    node: str
    code: int | None = None
    pgid: int | None = None
    detail: str = ""
    ranks: list[int] = field(default_factory=list)


def run_id(job_id: int, fence: int, attempt: int) -> str:
    return f"synclane-{job_id}-{fence}-{attempt}"


def _key(job_id: int) -> str:
    return f"{KEY_PREFIX}{job_id}"


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, decode_responses=True)


def _write(job_id: int, name: str, value: dict[str, Any]) -> None:
    client = _client()
    with client.pipeline() as pipe:
        pipe.hset(_key(job_id), name, json.dumps(value))
        pipe.expire(_key(job_id), KEY_TTL_S)
        pipe.execute()


def announce(job_id: int, attempt: Attempt) -> None:
    """Tell every node of the run to start ``attempt``."""
    _write(job_id, "attempt", asdict(attempt))


# Replace (or delete) the announcement only while it is still the caller's attempt: a
# supervisor ending its run must not overwrite the next admission's announcement.
_IF_OURS = """
local current = redis.call('HGET', KEYS[1], 'attempt')
if not current or cjson.decode(current)['run_id'] ~= ARGV[1] then return 0 end
if ARGV[2] == '' then return redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'attempt', ARGV[2])
return 1
"""


def announce_stop(job_id: int, attempt: Attempt) -> bool:
    """Tell every node to stop ``attempt`` (state STOP); False if a newer one was announced."""
    stop = json.dumps(asdict(attempt))
    return bool(_client().eval(_IF_OURS, 1, _key(job_id), attempt.run_id, stop))


def current(job_id: int) -> Attempt | None:
    """The attempt node rank 0 announced last, or None."""
    raw = _client().hget(_key(job_id), "attempt")
    return Attempt(**json.loads(raw)) if raw else None


def report(job_id: int, node_rank: int, value: Report) -> None:
    _write(job_id, f"node:{node_rank}", asdict(value))


def reports(job_id: int) -> dict[int, Report]:
    """Node rank -> its last report (any attempt: compare ``run_id``)."""
    found = {}
    for name, raw in _client().hgetall(_key(job_id)).items():
        if str(name).startswith("node:"):
            found[int(str(name).removeprefix("node:"))] = Report(**json.loads(raw))
    return found


def forget(job_id: int, run_id: str) -> None:
    """Drop the run's hash if ``run_id`` is still its attempt (the run's end, node rank 0)."""
    _client().eval(_IF_OURS, 1, _key(job_id), run_id, "")


def rendezvous_port(address: str = "") -> int:
    """A TCP port free on all interfaces now: from SYNCLANE_RDZV_PORTS if set, else any.

    Raises OSError if every port of the configured range is taken.
    """
    low, high = _port_range()
    for port in range(low, high + 1) if low else [0]:
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError(f"no free port in SYNCLANE_RDZV_PORTS {low}-{high}")


def rendezvous_open(endpoint: str, *, timeout_s: float = 0.5) -> bool:
    """True if something accepts TCP connections at ``endpoint`` (``host:port``).

    Node rank 0's torchrun hosts the rendezvous store there once it has started; another
    node's torchrun that comes first may give up before the store exists (seen under load).
    """
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _port_range() -> tuple[int, int]:
    text = str(getattr(settings, "SYNCLANE_RDZV_PORTS", "") or "")
    if not text:
        return 0, 0
    low, _, high = text.partition("-")
    return int(low), int(high or low)
