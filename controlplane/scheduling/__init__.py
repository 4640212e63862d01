"""The scheduling core: admission, fair share, preemption, placement and bandwidth allocation.

Pure Python (standard library only; an import-linter contract enforces it), strictly typed,
no Django, Celery or torch. ``python -m controlplane.scheduling.simulate TRACE.json`` replays
a trace against it.

How the control plane uses it (``controlplane/jobs/adapters.py``), on every admission,
completion, priority change, quota change and link change:

1. Build a :class:`Snapshot`: ``Cluster(slots=<slots of live nodes>, fabric_bps=<sum of the
   nodes' fabric bandwidth>)``; one :class:`TenantQuota` per tenant (bandwidth in bit/s, so
   Mbit/s x 1e6); every ``queued`` job as a :class:`JobRequest`; every job that holds slots
   (``admitted``, ``running``, ``restarting``) as a :class:`RunningJob` whose ``started_at`` is
   its admission time. Times are seconds on one clock (``datetime.timestamp()``), ``priority``
   is the class value (:class:`PriorityClass`), ``remaining_steps`` and ``steps_per_second``
   come from the run's last progress report (None if unknown).
2. Call ``decision = schedule(snapshot, now)``. It changes nothing.
3. Apply :class:`Decision`, in one transaction: each :class:`Preemption` moves its job to
   ``preempted`` (the supervisor checkpoints it; it returns to ``queued``); each
   :class:`Admission` moves its job to ``admitted`` (its ranks launch once the victims named in
   ``preempts`` have released their slots); store every :class:`Waiting` (``position``,
   ``queue_length``, ``code``, ``reason``) on its job; publish every :class:`Allocation`
   (``bps``) for its run; ``usage`` feeds the quota page and the usage API.

On several nodes (gang, topology-aware placement, :mod:`.placement`), the same calls with:

- ``Cluster.from_nodes(nodes, links)``: one :class:`Node` per registered node (``name``,
  ``slots``, ``fabric_bps``, ``labels``, ``schedulable=False`` when cordoned, draining or lost:
  it keeps its jobs and takes no new ones; leave out nodes whose slots no longer count), and one
  :class:`Link` per measured node pair (``bandwidth_bps``, ``degraded``). The runtime measures
  ranks, not nodes: :func:`links_from_ranks` turns its rank-pair results (with the placement of
  the job that measured them) into node links;
- each :class:`JobRequest`'s ``node_selector`` (labels every node must carry);
- each :class:`RunningJob`'s ``placement`` (``Placement.from_json(job.placement["nodes"])``;
  None for a job with no recorded nodes: it then counts against the cluster's total only).

Each :class:`Admission` then carries a :class:`Placement`: ordered :class:`NodePart` s (the
order is torchrun's node rank, the first node hosts the rendezvous), ``to_json()`` gives
``[{"node": "n1", "ranks": [0, 1]}, ...]`` (add each node's address) and ``why`` the sentence
for the job page. A job that cannot be placed waits with ``node_selector`` (no schedulable node
has its labels), ``cluster_slots`` (not enough free slots on such nodes at once) or
``cluster_bandwidth`` (its floor does not fit the fabric of the nodes it would span), and a
reason naming the label, the free slots per node or the fabric. Allocations respect each
node's fabric; a job on one node uses none. ``place(job, nodes, links, running)`` answers for
one job without admitting anything (a :class:`Placement` or an :class:`Unplaced`). A
:class:`Cluster` without nodes is one pool, exactly as before.

The control plane's workers, the simulator and the benchmarks keep a :class:`Queues` between
decisions instead: they tell it each arrival (``submit``), withdrawal (``withdraw``), end
(``release``) and cluster change (``resize``), and ``decide(queues, now)`` looks only at the
queues those changes may have unblocked. With ``explain_looked`` its ``reasons`` say why each
looked-at tenant's jobs wait, by equivalence class (:class:`WaitReasons`).

When only links or priorities change, ``allocate(cluster=..., tenants=..., running=...,
now=...)`` recomputes the allocations alone. When an admin lowers a quota below current use and
chooses to preempt now, ``over_quota(snapshot)`` names the jobs to preempt.

The caller keeps job ids unique across pending and running (``schedule`` raises
``ValueError`` otherwise) and passes each job's ``evictions``, ``requeued_at`` and
``checkpoint_interval_s``, and each running job's admission time as ``started_at``: the
preemption protections of :class:`Options` read them (see :mod:`.preemption`). A job's
``launch_faults`` and ``launch_fault_at`` drive its launch back-off the same way.
"""

from .admission import Queues
from .bandwidth import allocate, urgency, water_fill
from .placement import Topology, Unplaced, links_from_ranks, place
from .preemption import over_quota
from .scheduler import decide, schedule
from .types import (
    DEFAULT_QUEUE_POLICY,
    Admission,
    AdmissionOrder,
    Allocation,
    Cluster,
    Decision,
    JobRequest,
    Link,
    Node,
    NodePart,
    Options,
    Placement,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    QueuePolicy,
    RunningJob,
    Snapshot,
    TenantQuota,
    TenantUsage,
    WaitCode,
    Waiting,
    WaitReasons,
)

__all__ = [
    "DEFAULT_QUEUE_POLICY",
    "Admission",
    "AdmissionOrder",
    "Allocation",
    "Cluster",
    "Decision",
    "JobRequest",
    "Link",
    "Node",
    "NodePart",
    "Options",
    "Placement",
    "Preemption",
    "PreemptionPolicy",
    "PriorityClass",
    "QueuePolicy",
    "Queues",
    "RunningJob",
    "Snapshot",
    "TenantQuota",
    "TenantUsage",
    "Topology",
    "Unplaced",
    "WaitCode",
    "WaitReasons",
    "Waiting",
    "allocate",
    "decide",
    "links_from_ranks",
    "over_quota",
    "place",
    "schedule",
    "urgency",
    "water_fill",
]
