"""Writes about nodes: cordon, drain, uncordon, and settling drained nodes; what pages show.

    node_cordon(node=n, actor=admin)     # no new placements; what runs there keeps running
    node_drain(node=n, actor=admin)      # cordon, then each job on it checkpoints and requeues
    node_uncordon(node=n, actor=admin)   # placements may use it again
    nodes_settle_drained()               # a draining node that holds no job becomes cordoned

Each write is one conditional UPDATE on the node's stored state, and is told to the cluster's
websocket group after commit. A drain reuses the preemption path (``request_preemption``): the
run's supervisor checkpoints and the job goes back to the queue, to be placed elsewhere.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.jobs.choices import ACTIVE, NodeState
from controlplane.jobs.models import Job, Node
from controlplane.jobs.placement import active_jobs_on, slots_used_by_node
from controlplane.jobs.scheduler import request_preemption
from controlplane.jobs.services import request_schedule
from controlplane.lib.publish import publish_on_commit
from controlplane.telemetry.groups import CLUSTER_GROUP
from controlplane.tenancy.access import AnyUser

log = logging.getLogger(__name__)


class NodeStateError(ValueError):
    """The node is not in a state that allows the change (the message says why)."""


def _actor_name(actor: AnyUser | None) -> str:
    return getattr(actor, "username", "") or "the control plane"


def _set_state(node: Node, to: str, *, allowed_from: set[str], reason: str) -> bool:
    """Move the node's stored state to ``to`` if it is one of ``allowed_from``; True if moved."""
    touched = Node.objects.filter(pk=node.pk, state__in=allowed_from).update(
        state=to, state_reason=reason[:300], state_changed_at=timezone.now()
    )
    node.refresh_from_db()
    if touched:
        log.info("node %s: %s (%s)", node.name, to, reason)
        publish_on_commit(CLUSTER_GROUP, node_message(node))
    return bool(touched)


@transaction.atomic
def node_cordon(*, node: Node, actor: AnyUser | None, reason: str = "") -> Node:
    """Stop new placements on ``node``; its running jobs keep running. Returns the node.

    A node already cordoned or draining stays as it is.
    """
    text = f"cordoned by {_actor_name(actor)}" + (f": {reason}" if reason else "")
    _set_state(node, NodeState.CORDONED, allowed_from={NodeState.READY}, reason=text)
    return node


@transaction.atomic
def node_drain(*, node: Node, actor: AnyUser | None, reason: str = "") -> tuple[Node, list[int]]:
    """Cordon ``node`` and ask every job placed on it to checkpoint and requeue.

    Returns the node and the ids of the jobs asked now (a job already asked is not asked
    again). The node shows ``draining`` until it holds no job, then ``cordoned``
    (``nodes_settle_drained``).
    """
    text = f"drained by {_actor_name(actor)}" + (f": {reason}" if reason else "")
    _set_state(
        node,
        NodeState.DRAINING,
        allowed_from={NodeState.READY, NodeState.CORDONED, NodeState.DRAINING},
        reason=text,
    )
    asked = [
        job.pk
        for job in active_jobs_on(node.name)
        if request_preemption(job.pk, reason=f"node {node.name} {text}")
    ]
    request_schedule()  # the requeued jobs are placed elsewhere, and the drain settled
    return node, asked


@transaction.atomic
def node_uncordon(*, node: Node, actor: AnyUser | None) -> Node:
    """Let placements use ``node`` again (from cordoned or draining). Returns the node.

    Jobs a drain already asked to requeue still requeue; they may be placed here again.
    """
    text = f"uncordoned by {_actor_name(actor)}"
    if _set_state(
        node,
        NodeState.READY,
        allowed_from={NodeState.CORDONED, NodeState.DRAINING},
        reason=text,
    ):
        request_schedule()
    return node


def nodes_settle_drained(now: dt.datetime | None = None) -> list[str]:
    """Draining nodes that hold no active job become ``cordoned``; return their names."""
    draining = list(Node.objects.filter(state=NodeState.DRAINING))
    if not draining:
        return []
    held = slots_used_by_node(Job.objects.filter(status__in=ACTIVE))
    settled = []
    for node in draining:
        if held.get(node.name):
            continue
        if _set_state(
            node,
            NodeState.CORDONED,
            allowed_from={NodeState.DRAINING},
            reason=f"{node.state_reason}; no job left",
        ):
            settled.append(node.name)
    return settled


def node_message(node: Node, now: dt.datetime | None = None) -> dict[str, Any]:
    """The cluster websocket's ``node`` message: the node's status as the page shows it."""
    return {
        "type": "node",
        "node": node.name,
        "data": {
            "state": node.status(now),
            "state_reason": node.state_reason,
            "slots": node.slots,
        },
    }


def nodes_message(now: dt.datetime | None = None) -> dict[str, Any]:
    """The cluster websocket's ``nodes`` message: every node's status, so a page sees a node
    turn ``lost`` (which no write announces) within one scheduling tick."""
    now = now or timezone.now()
    return {
        "type": "nodes",
        "data": {
            node.name: {"state": node.status(now), "state_reason": node.state_reason}
            for node in Node.objects.all()
        },
    }
