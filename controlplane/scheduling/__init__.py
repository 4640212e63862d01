"""The scheduling core: admission, fair share, preemption and bandwidth allocation.

Pure Python (standard library only; a test enforces it), strictly typed, no Django, Celery or
torch. ``python -m controlplane.scheduling.simulate TRACE.json`` replays a trace against it.

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

When only links or priorities change, ``allocate(cluster=..., tenants=..., running=...,
now=...)`` recomputes the allocations alone. When an admin lowers a quota below current use and
chooses to preempt now, ``over_quota(snapshot)`` names the jobs to preempt.

Two rules the caller keeps: job ids are unique across pending and running (``schedule`` raises
``ValueError`` otherwise), and ``started_at`` grows with admission order across decisions
(the no-preemption-loop guarantee relies on it, see :mod:`.preemption`).
"""

from .bandwidth import allocate, urgency, water_fill
from .preemption import over_quota
from .scheduler import schedule
from .types import (
    Admission,
    Allocation,
    Cluster,
    Decision,
    JobRequest,
    Preemption,
    PriorityClass,
    QueuePolicy,
    RunningJob,
    Snapshot,
    TenantQuota,
    TenantUsage,
    WaitCode,
    Waiting,
)

__all__ = [
    "Admission",
    "Allocation",
    "Cluster",
    "Decision",
    "JobRequest",
    "Preemption",
    "PriorityClass",
    "QueuePolicy",
    "RunningJob",
    "Snapshot",
    "TenantQuota",
    "TenantUsage",
    "WaitCode",
    "Waiting",
    "allocate",
    "over_quota",
    "schedule",
    "urgency",
    "water_fill",
]
