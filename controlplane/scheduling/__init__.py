"""The scheduling core: admission, fair share, preemption and bandwidth allocation.

Pure Python (standard library only; a test enforces it), strictly typed, no Django, Celery or
torch. The control plane builds a :class:`Snapshot` from its models, calls :func:`schedule`
and applies the :class:`Decision`; ``python -m controlplane.scheduling.simulate TRACE.json``
replays a trace against the same code.
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
