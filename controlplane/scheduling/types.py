"""Plain data the scheduler reads (a snapshot) and the decision it returns.

Units, everywhere in this package:
- slots: whole worker slots (a job of world size N holds N slots);
- bandwidth: bit/s as ``float`` (``_bps`` suffix), never Mbit/s or bytes;
- time: seconds as ``float`` on one clock chosen by the caller (the Django adapter passes
  ``datetime.timestamp()``; the simulator passes its simulated clock). Deadlines, submit times,
  start times and ``now`` must all use that clock.

Every input class is a frozen, keyword-only dataclass that validates itself in
``__post_init__`` and raises ``ValueError`` on nonsense (negative slots, a floor above its
ceiling, ...), so a bad row fails where it is built, not deep inside the scheduler.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any


class PriorityClass(enum.IntEnum):
    """The named priority classes; a job's ``priority`` may be any positive int."""

    LOW = 100
    NORMAL = 200
    HIGH = 300
    CRITICAL = 400

    @classmethod
    def label(cls, priority: int) -> str:
        """Return the name of the highest class at or below ``priority`` ("low" if below all)."""
        name = "low"
        for member in cls:
            if priority >= member.value:
                name = member.name.lower()
        return name


class QueuePolicy(enum.StrEnum):
    """How a tenant's queue treats a head job that does not fit (Kueue's two strategies)."""

    STRICT_FIFO = "StrictFIFO"  # the head blocks every job behind it
    BEST_EFFORT_FIFO = "BestEffortFIFO"  # jobs behind a head that does not fit may go first


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _non_negative_or_none(value: float | None, name: str) -> None:
    _require(value is None or value >= 0, f"{name} must be >= 0 or None, got {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """Capacity of the whole cluster: slots of live nodes and the total fabric bandwidth."""

    slots: int
    fabric_bps: float

    def __post_init__(self) -> None:
        _require(self.slots >= 0, f"cluster slots must be >= 0, got {self.slots}")
        _require(self.fabric_bps >= 0, f"fabric_bps must be >= 0, got {self.fabric_bps}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantQuota:
    """A tenant's quota and queue settings.

    ``cohort`` names the group whose idle nominal quota the tenant may borrow and to which it
    lends its own. A limit of ``None`` means "no limit" (borrow or lend everything the cohort
    allows); a tenant without a cohort neither borrows nor lends, whatever its limits say.
    ``max_running_jobs`` of ``None`` means unlimited. ``weight`` scales fair share: a tenant of
    weight 2 is entitled to twice the share of a tenant of weight 1.
    """

    name: str
    nominal_slots: int
    nominal_bandwidth_bps: float
    max_running_jobs: int | None = None
    weight: float = 1.0
    cohort: str | None = None
    borrowing_limit_slots: int | None = None
    lending_limit_slots: int | None = None
    borrowing_limit_bps: float | None = None
    lending_limit_bps: float | None = None
    queue_policy: QueuePolicy = QueuePolicy.BEST_EFFORT_FIFO

    def __post_init__(self) -> None:
        _require(bool(self.name), "tenant name must not be empty")
        _require(self.nominal_slots >= 0, f"{self.name}: nominal_slots must be >= 0")
        _require(self.nominal_bandwidth_bps >= 0, f"{self.name}: nominal bandwidth must be >= 0")
        _require(
            self.max_running_jobs is None or self.max_running_jobs >= 0,
            f"{self.name}: max_running_jobs must be >= 0 or None",
        )
        _require(self.weight > 0 and math.isfinite(self.weight), f"{self.name}: weight must be > 0")
        _non_negative_or_none(self.borrowing_limit_slots, "borrowing_limit_slots")
        _non_negative_or_none(self.lending_limit_slots, "lending_limit_slots")
        _non_negative_or_none(self.borrowing_limit_bps, "borrowing_limit_bps")
        _non_negative_or_none(self.lending_limit_bps, "lending_limit_bps")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRequest:
    """A job waiting in its tenant's queue (also the base of :class:`RunningJob`).

    ``slots`` is the world size. ``bandwidth_ceiling_bps`` of ``None`` means "as much as the
    fabric gives". ``deadline`` of ``None`` means none. ``remaining_steps`` and
    ``steps_per_second`` (the current rate estimate) feed deadline urgency; either may be
    ``None`` when unknown, and then only a passed deadline raises urgency.
    """

    id: str
    tenant: str
    slots: int
    submit_time: float
    priority: int = PriorityClass.NORMAL
    bandwidth_floor_bps: float = 0.0
    bandwidth_ceiling_bps: float | None = None
    deadline: float | None = None
    remaining_steps: float | None = None
    steps_per_second: float | None = None

    def __post_init__(self) -> None:
        _require(self.slots >= 1, f"job {self.id}: slots must be >= 1, got {self.slots}")
        _require(self.priority >= 1, f"job {self.id}: priority must be >= 1")
        _require(self.bandwidth_floor_bps >= 0, f"job {self.id}: floor must be >= 0")
        _require(
            self.bandwidth_ceiling_bps is None
            or self.bandwidth_ceiling_bps >= self.bandwidth_floor_bps,
            f"job {self.id}: ceiling must be >= floor",
        )
        _non_negative_or_none(self.remaining_steps, "remaining_steps")
        _non_negative_or_none(self.steps_per_second, "steps_per_second")

    def started(self, at: float) -> RunningJob:
        """Return this job as running since ``at`` (what an admission turns it into)."""
        return RunningJob(**_request_fields(self), started_at=at)

    def requeued(self) -> JobRequest:
        """Return this job as a plain queued request (what a preemption turns it into)."""
        return JobRequest(**_request_fields(self))


def _request_fields(job: JobRequest) -> dict[str, Any]:
    return {f.name: getattr(job, f.name) for f in fields(JobRequest)}


@dataclass(frozen=True, kw_only=True, slots=True)
class RunningJob(JobRequest):
    """A job holding slots now (admitted, running or restarting); ``started_at`` is when it
    was admitted, which makes the newest job the first victim among equals."""

    started_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """Everything one scheduling decision needs.

    ``running`` lists jobs that hold slots now (admitted, running, restarting); a job that was
    preempted and is checkpointing belongs to neither list. Jobs of a tenant missing from
    ``tenants`` are treated as a tenant with zero quota (they wait, with that reason).
    """

    cluster: Cluster
    tenants: Sequence[TenantQuota]
    pending: Sequence[JobRequest]
    running: Sequence[RunningJob]


class WaitCode(enum.StrEnum):
    """Why a job waits; stable strings for the API (the reason text is for people)."""

    TOO_LARGE = "too_large"  # cannot fit even in an empty cluster / at the tenant's full limit
    TENANT_JOBS = "tenant_jobs"  # tenant runs max_running_jobs already
    TENANT_SLOTS = "tenant_slots"  # over the tenant's nominal slots and it cannot borrow
    COHORT_SLOTS = "cohort_slots"  # borrowing limit reached or no idle slots in the cohort
    CLUSTER_SLOTS = "cluster_slots"  # not enough free slots in the cluster
    TENANT_BANDWIDTH = "tenant_bandwidth"  # floors over the tenant's nominal bandwidth
    CLUSTER_BANDWIDTH = "cluster_bandwidth"  # floors of running jobs fill the fabric
    BLOCKED_BY_HEAD = "blocked_by_head"  # behind a head that does not fit in a StrictFIFO queue


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """Start this job now. ``preempts`` lists the victims whose slots it takes: the caller must
    preempt them (checkpoint, requeue) before the job's ranks launch."""

    job_id: str
    tenant: str
    slots: int
    borrowed_slots: int  # how many of the tenant's slots are above nominal after admission
    # (floors are never borrowed: they come from the tenant's own nominal bandwidth)
    preempts: tuple[str, ...]
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Preemption:
    """Stop this running job (checkpoint, back to queued) so that ``by_job_id`` can run.
    ``reclaim`` is True when a cohort peer takes back lent quota, False for a same-tenant
    priority preemption. ``by_job_id`` is None only in :func:`~.preemption.over_quota`'s
    answer, where the job goes because its tenant's quota was lowered below its use."""

    job_id: str
    tenant: str
    by_job_id: str | None
    reclaim: bool
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Waiting:
    """A job left in its queue: its 1-based ``position`` among the tenant's waiting jobs
    (queue order) out of ``queue_length``, a stable ``code`` and a readable ``reason``."""

    job_id: str
    tenant: str
    code: WaitCode
    position: int
    queue_length: int
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Allocation:
    """Bandwidth granted to one running job. ``floor_met`` is False only when the fabric has
    shrunk below the floors of the jobs already running (lower priorities lose theirs first)."""

    job_id: str
    tenant: str
    bps: float
    weight: float  # priority value x deadline urgency, used for water-filling
    urgency: float
    floor_met: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantUsage:
    """A tenant's use after the decision, for quota pages and the usage API."""

    tenant: str
    slots_used: int
    slots_nominal: int
    slots_borrowed: int
    floor_bps_reserved: float
    bandwidth_bps: float  # sum of allocations
    bandwidth_nominal_bps: float
    bandwidth_borrowed_bps: float  # allocations above nominal (lent by cohort peers)
    running_jobs: int
    waiting_jobs: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """What :func:`controlplane.scheduling.schedule` returns.

    - ``admissions``: jobs to start, in the order they were admitted;
    - ``preemptions``: running jobs to stop, each naming the job it makes room for;
    - ``waiting``: every pending job not admitted, keyed by job id, in queue order per tenant;
    - ``allocations``: bandwidth for every job that holds slots after the decision (running
      jobs minus victims plus admissions), keyed by job id;
    - ``usage``: per tenant, keyed by tenant name.
    """

    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    waiting: Mapping[str, Waiting]
    allocations: Mapping[str, Allocation]
    usage: Mapping[str, TenantUsage]
