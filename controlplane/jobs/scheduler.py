"""Apply the pure scheduling core's decisions to the database, Redis and websockets.

    schedule_pass()   # one pass: changes since the last -> core.decide() -> apply

Run by the ``schedule_tick`` Celery task on every submit, job end, priority or quota
change, and every few seconds by beat.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane import scheduling as core
from controlplane.jobs import adapters, queue_state, state
from controlplane.jobs.choices import ACTIVE, JobStatus, node_queue
from controlplane.jobs.models import Job, Node
from controlplane.lib import redis_clients
from controlplane.lib.publish import publish
from controlplane.lib.tasks import enqueue_on_commit
from controlplane.telemetry.groups import CLUSTER_GROUP, job_group, tenant_group
from controlplane.tenancy.models import Tenant
from workers.runtime import protocol

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    allocations: dict[int, float] = field(default_factory=dict)  # job id -> Mbit/s


def schedule_pass() -> PassResult:
    """Decide and apply one scheduling pass; return what changed.

    Steps: 1. lock the tenant rows (one pass at a time), and settle drained nodes (a draining
    node that holds no job becomes cordoned); 2. bring this process's queues up to date
    (``queue_state``: the jobs changed since its last pass, or all of them) and decide;
    3. ask victims to stop; 4. admit (launch on commit); 5. write the waiting reasons that
    changed; 6. write allocations, and push them to runs and browsers on commit.
    """
    state = queue_state.current()
    with state.lock:
        return _pass(state)


def _pass(state: queue_state.QueueState) -> PassResult:
    from controlplane.jobs.nodes import nodes_message, nodes_settle_drained

    result = PassResult()
    with transaction.atomic():
        # FOR NO KEY UPDATE: passes still exclude each other, but a submit's insert of a job
        # (whose deferred foreign key check takes FOR KEY SHARE on its tenant at COMMIT) does
        # not wait for the whole pass, as it did under FOR UPDATE.
        tenants = list(Tenant.objects.select_for_update(no_key=True).order_by("pk"))
        nodes_settle_drained()
        now = timezone.now()
        # The queues as this process's last pass left them, brought up to date from the
        # change feed (or read from scratch: then every waiting job's reason is written).
        rebuilt = state.prepare(tenants, now)
        # Only a committed pass is built on: one rolled back (here or by a caller's
        # transaction) changed the queues and not the database.
        transaction.on_commit(state.committed)
        assert state.queues is not None
        decision = core.decide(
            state.queues, now.timestamp(), explain=rebuilt, explain_looked=not rebuilt
        )
        state.applied(decision)
        for preemption in decision.preemptions:
            if request_preemption(int(preemption.job_id), reason=preemption.reason):
                result.preempted.append(int(preemption.job_id))
        # The admitted jobs and the nodes' addresses, read once for the whole decision.
        admitted = Job.objects.in_bulk([int(a.job_id) for a in decision.admissions])
        addresses = dict(Node.objects.values_list("name", "address"))
        for admission in decision.admissions:
            _admit(admitted[int(admission.job_id)], admission, addresses)
            result.admitted.append(int(admission.job_id))
        if rebuilt:
            state.remember(decision.reasons)
            waiting: Iterable[tuple[int, str, str]] = (
                (int(w.job_id), w.detail, str(w.code)) for w in decision.waiting.values()
            )
        else:
            waiting = state.explained(decision.reasons)
        _write_waiting(waiting, state.written)
        result.allocations = _write_allocations(decision.allocations)
        # Every node's status, so the cluster page sees a node turn lost (no write says so).
        transaction.on_commit(lambda: publish(CLUSTER_GROUP, nodes_message()))
    return result


def request_preemption(job_id: int, *, reason: str) -> bool:
    """Ask the job's supervisor to checkpoint and requeue it; True if the job was asked.

    An admitted job that has not launched yet goes straight back to the queue. Either way the
    job's eviction count grows by one and ``evicted_at`` is now (the core's eviction limit and
    back-off read them).
    """
    job = Job.objects.filter(pk=job_id, status__in=ACTIVE).first()
    if job is None:
        return False
    evicted: dict[str, Any] = {"evictions": F("evictions") + 1, "evicted_at": timezone.now()}
    if job.status == JobStatus.ADMITTED:
        try:
            state.transition(
                job, JobStatus.QUEUED, reason=f"back to the queue: {reason}", **evicted
            )
            return True
        except state.TransitionError:
            job.refresh_from_db()
    touched = Job.objects.filter(pk=job_id, status__in=ACTIVE, preempt_requested=False).update(
        preempt_requested=True, **evicted
    )
    if touched:
        state.note(job, f"preemption requested: {reason}")
    return bool(touched)


def _admit(job: Job, admission: core.Admission, addresses: Mapping[str, str]) -> None:
    """Admit the job where the core placed it, and launch its ranks there after commit.

    The placement is stored as ``{"nodes": [{"node", "address", "ranks"}], "why"}``; the
    launch goes to each placed node's own queue (``node.<name>``): one ``launch_job(id)`` for a
    job on one node, one ``launch_job(id, node_rank)`` per node for a job that spans nodes.
    Without a placement (no node registered: one pooled machine) the launch takes the shared
    queue, as on one machine.
    """
    placement: dict[str, Any] = {}
    if admission.placement is not None:
        placement = placement_json(admission.placement, addresses)
    if admission.preempts:
        placement["waits_for"] = [int(v) for v in admission.preempts]
    state.transition(
        job,
        JobStatus.ADMITTED,
        reason=admission.reason,
        placement=placement,
        wait_code="",
        preempt_requested=False,
        cancel_requested=False,
    )
    parts = placement.get("nodes") or []
    if len(parts) > 1:
        for node_rank, part in enumerate(parts):
            enqueue_on_commit(
                "workers.tasks.launch_job", job.pk, node_rank, queue=node_queue(part["node"])
            )
    elif parts:
        enqueue_on_commit("workers.tasks.launch_job", job.pk, queue=node_queue(parts[0]["node"]))
    else:
        enqueue_on_commit("workers.tasks.launch_job", job.pk)


def placement_json(placement: core.Placement, addresses: Mapping[str, str]) -> dict[str, Any]:
    """The core's placement as Job.placement stores it, each node with its address (by name)."""
    nodes = [{**part, "address": addresses.get(part["node"], "")} for part in placement.to_json()]
    return {"nodes": nodes, "why": placement.why}


def _write_waiting(
    waiting: Iterable[tuple[int, str, str]], written: dict[int, tuple[str, str]]
) -> None:
    """Store each waiting job's (job, reason, code) where they differ from those stored
    (``written``, kept up to date here), one UPDATE per distinct reason. The reason leaves out
    the queue position: every admission would move it for every job behind, making each pass
    rewrite the whole queue; pages and the API read it live (``services.queue_position``)."""
    changed: dict[tuple[str, str], list[int]] = {}
    for pk, reason, code in waiting:
        wanted = (reason, code)
        if written.get(pk) != wanted:
            changed.setdefault(wanted, []).append(pk)
            written[pk] = wanted
    for (reason, code), pks in changed.items():
        Job.objects.filter(pk__in=pks, status=JobStatus.QUEUED).update(
            status_reason=reason, wait_code=code
        )


def _write_allocations(allocations: Mapping[str, core.Allocation]) -> dict[int, float]:
    """Store each holding job's allocation; push changes after commit. Returns Mbit/s by job."""
    # A run paced at 0 bit/s would never finish a collective: every holder gets at least
    # a trickle (a tenant with no bandwidth quota still makes slow progress).
    floor = settings.SYNCLANE_MIN_ALLOCATION_MBPS
    mbps = {int(job_id): max(a.bps / adapters.MBPS, floor) for job_id, a in allocations.items()}
    changed: list[tuple[int, str, float]] = []
    current = dict(Job.objects.filter(pk__in=mbps).values_list("pk", "allocation_mbps"))
    tenants = dict(Job.objects.filter(pk__in=mbps).values_list("pk", "tenant__slug"))
    for job_id, value in mbps.items():
        if (old := current.get(job_id)) is None or abs(old - value) > 1e-6:
            Job.objects.filter(pk=job_id).update(allocation_mbps=value)
            changed.append((job_id, tenants[job_id], value))
    # Jobs that no longer hold slots hold no bandwidth either.
    released = list(
        Job.objects.exclude(pk__in=mbps)
        .filter(allocation_mbps__isnull=False)
        .values_list("pk", flat=True)
    )
    Job.objects.filter(pk__in=released).update(allocation_mbps=None)
    transaction.on_commit(lambda: push_allocations(changed, released, held=mbps))
    return mbps


def push_allocations(
    changed: list[tuple[int, str, float]],
    released: list[int],
    *,
    held: Mapping[int, float] | None = None,
) -> None:
    """Tell runs (Redis key + nudge) and browsers (channels) about new allocations.

    ``held`` (job id -> Mbit/s, every job holding bandwidth) is written to Redis too,
    changed or not: the database is the record, and a Redis restart loses the keys the
    runs' throttles read (absent means unlimited). Rewriting them every pass restores
    them within one beat tick; the SETs ride in the same round trip.
    """
    try:
        client = redis_clients.shared(socket_timeout=2)
        with client.pipeline(transaction=False) as pipe:
            for job_id, value in (held or {}).items():
                pipe.set(protocol.allocation_key(job_id), str(int(value * adapters.MBPS)))
            for job_id, _, value in changed:
                bps = str(int(value * adapters.MBPS))
                pipe.set(protocol.allocation_key(job_id), bps)
                pipe.publish(protocol.allocation_channel(job_id), bps)
            for job_id in released:
                pipe.delete(protocol.allocation_key(job_id))
            pipe.execute()
    except (redis.RedisError, OSError):
        log.warning("could not push allocations to Redis", exc_info=True)
    tenant_ids = dict(Tenant.objects.values_list("slug", "pk"))
    for job_id, tenant, value in changed:
        message = {
            "type": "allocation",
            "job": job_id,
            "data": {"allocation_mbps": value, "tenant": tenant},
        }
        publish(job_group(job_id), message)
        publish(tenant_group(tenant_ids[tenant]), message)
        publish(CLUSTER_GROUP, message)
