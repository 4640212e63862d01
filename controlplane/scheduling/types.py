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
from dataclasses import dataclass, field, fields
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
    """How a tenant's queue treats a head job that does not fit (Kueue's two strategies).

    The values are what the control plane stores; Kueue's names ("StrictFIFO",
    "BestEffortFIFO", used in trace files) are accepted too.
    """

    STRICT_FIFO = "strict_fifo"  # the head blocks every job behind it
    BEST_EFFORT_FIFO = "best_effort_fifo"  # jobs behind a head that does not fit may go first

    @classmethod
    def _missing_(cls, value: object) -> QueuePolicy | None:
        return _KUEUE_NAMES.get(str(value))


_KUEUE_NAMES = {
    "StrictFIFO": QueuePolicy.STRICT_FIFO,
    "BestEffortFIFO": QueuePolicy.BEST_EFFORT_FIFO,
}
# The policy of a tenant that names none (the control plane's queues default to it too).
DEFAULT_QUEUE_POLICY = QueuePolicy.STRICT_FIFO


class PreemptionPolicy(enum.StrEnum):
    """Which running jobs of its own tenant a queue's job may preempt (Kueue's
    ``withinClusterQueue``). Reclaiming lent quota from cohort peers is allowed under every
    policy but ``NEVER``. Kueue's names ("LowerPriority", ...) are accepted too."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "lower_or_newer_equal_priority"  # or equal, submitted later

    @classmethod
    def _missing_(cls, value: object) -> PreemptionPolicy | None:
        return _KUEUE_PREEMPTION.get(str(value))


_KUEUE_PREEMPTION = {
    "Never": PreemptionPolicy.NEVER,
    "LowerPriority": PreemptionPolicy.LOWER_PRIORITY,
    "LowerOrNewerEqualPriority": PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
}


class AdmissionOrder(enum.StrEnum):
    """How a cohort's queues take turns within one decision ("FairShare" and "Classical" are
    accepted too, as trace files spell them)."""

    # Weighted dominant-resource fair share; a queue gets as many turns as it has jobs that fit.
    FAIR_SHARE = "fair_share"
    # Kueue's classical order: at most one head per queue per decision, heads that fit without
    # borrowing first, then by priority, then by submit time.
    CLASSICAL = "classical"

    @classmethod
    def _missing_(cls, value: object) -> AdmissionOrder | None:
        return {"FairShare": cls.FAIR_SHARE, "Classical": cls.CLASSICAL}.get(str(value))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _non_negative_or_none(value: float | None, name: str) -> None:
    _require(value is None or value >= 0, f"{name} must be >= 0 or None, got {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    """One worker host. ``slots`` is its capacity (what its running jobs hold is counted from
    their placements, not given here); ``fabric_bps`` is its network interface's bandwidth to
    the other nodes. A node that is not ``schedulable`` (cordoned, draining, lost) keeps the
    jobs placed on it but takes no new ones. ``labels`` are what a job's ``node_selector``
    matches (every pair of the selector must be among them). ``address`` is where the other
    nodes reach it: torchrun's c10d rendezvous numbers a run's nodes in the order of their
    addresses (as text), so a placement numbers its ranks in that order too."""

    name: str
    slots: int
    fabric_bps: float
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True
    address: str = ""

    def __post_init__(self) -> None:
        _require(bool(self.name), "node name must not be empty")
        _require(self.slots >= 0, f"node {self.name}: slots must be >= 0, got {self.slots}")
        _require(self.fabric_bps >= 0, f"node {self.name}: fabric_bps must be >= 0")

    def matches(self, selector: Mapping[str, str]) -> bool:
        """Return True when the node carries every label of ``selector``."""
        labels = self.labels
        return all(labels.get(key) == value for key, value in selector.items())


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """The measured path between two nodes (either order): ``bandwidth_bps`` as the probes
    last measured it (None: not measured; the slower node's fabric is assumed) and whether
    the probes called it ``degraded`` (latency or jitter above the threshold)."""

    a: str
    b: str
    bandwidth_bps: float | None = None
    degraded: bool = False

    def __post_init__(self) -> None:
        _require(self.a != self.b, f"a link joins two nodes, got {self.a} twice")
        _non_negative_or_none(self.bandwidth_bps, "link bandwidth_bps")

    @property
    def key(self) -> tuple[str, str]:
        """The pair, in name order (a link has no direction)."""
        return (self.a, self.b) if self.a < self.b else (self.b, self.a)


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """Capacity of the whole cluster: slots of live nodes and the total fabric bandwidth.

    With ``nodes`` (build it with :meth:`from_nodes`), admission places every job on them
    (gang, topology-aware: :mod:`.placement`) and fabric is accounted per node; ``slots`` and
    ``fabric_bps`` must then be the nodes' sums. Without nodes the cluster is one pool of
    ``slots`` and ``fabric_bps`` (one machine, the simulator, the older callers), and every
    job's floor counts against the pooled fabric.
    """

    slots: int
    fabric_bps: float
    nodes: Sequence[Node] = ()
    links: Sequence[Link] = ()

    def __post_init__(self) -> None:
        _require(self.slots >= 0, f"cluster slots must be >= 0, got {self.slots}")
        _require(self.fabric_bps >= 0, f"fabric_bps must be >= 0, got {self.fabric_bps}")
        if not self.nodes:
            return
        names = {n.name for n in self.nodes}
        _require(len(names) == len(self.nodes), "a node name appears more than once")
        _require(
            self.slots == sum(n.slots for n in self.nodes),
            f"cluster slots {self.slots} are not its nodes' sum (use Cluster.from_nodes)",
        )

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node], links: Sequence[Link] = ()) -> Cluster:
        """The cluster of ``nodes`` (slots and fabric are their sums) and their ``links``."""
        return cls(
            slots=sum(n.slots for n in nodes),
            fabric_bps=sum(n.fabric_bps for n in nodes),
            nodes=tuple(nodes),
            links=tuple(links),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class NodePart:
    """The ranks of a job on one node: ``count`` ranks from ``first_rank`` on."""

    node: str
    first_rank: int
    count: int

    def __post_init__(self) -> None:
        _require(self.first_rank >= 0, f"part on {self.node}: first_rank must be >= 0")
        _require(self.count >= 1, f"part on {self.node}: a part holds at least one rank")

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.count)


@dataclass(frozen=True, kw_only=True, slots=True)
class Placement:
    """Where a job's ranks run: ordered node parts (the list order is torchrun's node rank;
    the first node hosts the rendezvous), ranks contiguous per node, and ``why`` for people
    ("2 nodes: n1 ranks 0-1, n2 ranks 2-3; packed, n3 skipped: link n1-n3 degraded")."""

    parts: tuple[NodePart, ...]
    why: str = ""

    def __post_init__(self) -> None:
        _require(bool(self.parts), "a placement has at least one node part")
        _require(len(set(self.nodes)) == len(self.parts), "a node appears twice in a placement")
        expected = 0
        for part in self.parts:
            _require(part.first_rank == expected, "placement ranks must be contiguous from 0")
            expected += part.count

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.node for p in self.parts)

    @property
    def world_size(self) -> int:
        return sum(p.count for p in self.parts)

    @property
    def spans(self) -> bool:
        """True when the job runs on several nodes (then it uses fabric on each of them)."""
        return len(self.parts) > 1

    def to_json(self) -> list[dict[str, Any]]:
        """The parts as ``Job.placement["nodes"]`` stores them (the caller adds addresses)."""
        return [{"node": p.node, "ranks": list(p.ranks)} for p in self.parts]

    @classmethod
    def from_json(cls, parts: Sequence[Mapping[str, Any]], why: str = "") -> Placement:
        """Rebuild a placement from :meth:`to_json`'s shape; ValueError if it is not one."""
        built = []
        for item in parts:
            ranks = [int(r) for r in item["ranks"]]
            _require(bool(ranks), f"part on {item['node']} has no ranks")
            _require(ranks == list(range(ranks[0], ranks[0] + len(ranks))), "ranks not contiguous")
            built.append(NodePart(node=str(item["node"]), first_rank=ranks[0], count=len(ranks)))
        return cls(parts=tuple(built), why=why)

    @classmethod
    def single(cls, node: str, ranks: int, why: str = "") -> Placement:
        """All ``ranks`` on ``node``."""
        return cls(parts=(NodePart(node=node, first_rank=0, count=ranks),), why=why)


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
    queue_policy: QueuePolicy = DEFAULT_QUEUE_POLICY
    preemption: PreemptionPolicy = PreemptionPolicy.LOWER_PRIORITY

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

    ``checkpoint_interval_s`` (None: the job never checkpoints) sets how much work an eviction
    destroys: the time run since the last checkpoint. ``evictions`` counts how often the job
    was preempted so far and ``requeued_at`` is when the last eviction put it back in the
    queue (None if never): they drive the back-off and the eviction limit of :class:`Options`.
    ``launch_faults`` counts the launches in a row that a platform fault sent back to the
    queue (Redis away, the control plane unreachable) and ``launch_fault_at`` is when the
    last one did (None if never): they drive the launch back-off of :class:`Options`.
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
    checkpoint_interval_s: float | None = None
    evictions: int = 0
    requeued_at: float | None = None
    launch_faults: int = 0
    launch_fault_at: float | None = None
    # Labels every node of the job must carry (see Node.matches); None or empty: any node.
    node_selector: Mapping[str, str] | None = None

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
        _require(
            self.checkpoint_interval_s is None or self.checkpoint_interval_s > 0,
            f"job {self.id}: checkpoint_interval_s must be > 0 or None",
        )
        _require(self.evictions >= 0, f"job {self.id}: evictions must be >= 0")
        _require(self.launch_faults >= 0, f"job {self.id}: launch_faults must be >= 0")

    @property
    def selector_key(self) -> tuple[tuple[str, str], ...]:
        """The node selector as a sorted tuple (hashable, for equivalence classes)."""
        selector = self.node_selector
        return tuple(sorted(selector.items())) if selector else ()

    def started(self, at: float, placement: Placement | None = None) -> RunningJob:
        """Return this job as running since ``at`` on ``placement`` (what an admission turns
        it into)."""
        return RunningJob(**_request_fields(self), started_at=at, placement=placement)

    def requeued(self, at: float | None = None) -> JobRequest:
        """Return this job back in the queue; with ``at``, as evicted once more at ``at`` (what
        a preemption turns it into)."""
        evicted = {} if at is None else {"evictions": self.evictions + 1, "requeued_at": at}
        return JobRequest(**{**_request_fields(self), **evicted})


def _request_fields(job: JobRequest) -> dict[str, Any]:
    return {name: getattr(job, name) for name in _REQUEST_FIELD_NAMES}


# A decision turns hundreds of requests into running jobs and back: look the names up once.
_REQUEST_FIELD_NAMES = tuple(f.name for f in fields(JobRequest))


@dataclass(frozen=True, kw_only=True, slots=True)
class RunningJob(JobRequest):
    """A job holding slots now (admitted, running or restarting); ``started_at`` is when it
    was admitted, which makes the newest job the first victim among equals."""

    started_at: float
    # Where its ranks run. None: not known (an older row, or a cluster given without nodes);
    # such a job counts against the cluster's total slots only.
    placement: Placement | None = None

    def work_lost(self, now: float) -> float:
        """Seconds of work an eviction at ``now`` destroys: the time run since the last
        checkpoint (all of it for a job that does not checkpoint)."""
        ran = max(0.0, now - self.started_at)
        interval = self.checkpoint_interval_s
        return ran if interval is None else ran % interval


@dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    """Scheduler-wide rules against preemption thrash, and the admission order per cohort.

    - ``min_run_time_s``: a job admitted less than this long ago is not preempted, unless the
      preemptor is ``critical``;
    - ``eviction_limit`` (k): a job evicted k times or more is only preempted by a job of
      strictly higher priority submitted after that job's last admission, so it is evicted
      at most k times while no new higher-priority job arrives;
    - ``backoff_base_s``, ``backoff_max_s``: an evicted job waits ``base * 2**(evictions-1)``
      (at most ``max``) after its eviction before it may be admitted again (Kueue's requeuing
      back-off; 0 turns it off);
    - ``launch_backoff_base_s``, ``launch_backoff_max_s``: a job whose last ``n`` launches a
      platform fault sent back waits ``base * 2**(n-1)`` (at most ``max``) after the last one,
      so a fault that lasts does not make it spin through admit-launch-requeue (0 turns it off);
    - ``cohort_order``: :class:`AdmissionOrder` by cohort name (cohorts not named, and tenants
      without a cohort, use fair share).
    """

    min_run_time_s: float = 0.0
    eviction_limit: int = 3
    backoff_base_s: float = 0.0
    backoff_max_s: float = 3600.0
    launch_backoff_base_s: float = 0.0
    launch_backoff_max_s: float = 60.0
    cohort_order: Mapping[str, AdmissionOrder] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.min_run_time_s >= 0, "min_run_time_s must be >= 0")
        _require(self.eviction_limit >= 1, "eviction_limit must be >= 1")
        _require(self.backoff_base_s >= 0, "backoff_base_s must be >= 0")
        _require(self.backoff_max_s >= self.backoff_base_s, "backoff_max_s must be >= base")
        _require(self.launch_backoff_base_s >= 0, "launch_backoff_base_s must be >= 0")
        _require(
            self.launch_backoff_max_s >= self.launch_backoff_base_s,
            "launch_backoff_max_s must be >= launch_backoff_base_s",
        )

    def backoff_until(self, job: JobRequest) -> float:
        """Return when ``job`` may be admitted again (-inf: any time): the later of its
        eviction back-off and its launch back-off."""
        return max(self.eviction_backoff_until(job), self.launch_backoff_until(job))

    def eviction_backoff_until(self, job: JobRequest) -> float:
        """Return when an evicted ``job`` may be admitted again (-inf: any time)."""
        if job.requeued_at is None or job.evictions == 0 or self.backoff_base_s <= 0:
            return -math.inf
        wait = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (job.evictions - 1))
        return job.requeued_at + wait

    def launch_backoff_s(self, faults: int) -> float:
        """Seconds a job waits after its ``faults``-th launch fault in a row (0 for none)."""
        if faults <= 0 or self.launch_backoff_base_s <= 0:
            return 0.0
        exponent = min(faults - 1, 64)  # 2**64 seconds is past any cap; no float overflow
        return min(self.launch_backoff_max_s, self.launch_backoff_base_s * 2.0**exponent)

    def launch_backoff_until(self, job: JobRequest) -> float:
        """Return when a job sent back by launch faults may be admitted again (-inf: any time)."""
        wait = self.launch_backoff_s(job.launch_faults)
        if job.launch_fault_at is None or wait <= 0:
            return -math.inf
        return job.launch_fault_at + wait

    def order(self, cohort: str | None) -> AdmissionOrder:
        if cohort is None:
            return AdmissionOrder.FAIR_SHARE
        return self.cohort_order.get(cohort, AdmissionOrder.FAIR_SHARE)


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
    options: Options = field(default_factory=Options)


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
    BACKOFF = "backoff"  # evicted, or its launch failed, recently: waits out its back-off
    NEXT_TURN = "next_turn"  # its queue admitted its one job this decision (classical order)
    NODE_SELECTOR = "node_selector"  # no schedulable node carries the labels the job asks for


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
    # Where its ranks go (None when the cluster was given without nodes: one pool, as before).
    placement: Placement | None = None


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
    work_lost_s: float = 0.0  # run time since the victim's last checkpoint, lost by stopping it


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
    # The reason without the position: what a store keeps, since every admission moves the
    # position of every job behind it (read the position live instead).
    detail: str = ""


# A job's equivalence class: priority, slots, floor bit/s, node selector (sorted label pairs).
ClassKey = tuple[int, int, float, tuple[tuple[str, str], ...]]
Reason = tuple["WaitCode", str]  # a wait code and its sentence (without the queue position)


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitReasons:
    """Why one tenant's jobs wait after a decision that looked at it.

    Every job of an equivalence class waits for the same reason (that of the class's head),
    so a store can rewrite a class's jobs only when the class's reason changed: ``of_class``.
    The exceptions are named: the head that blocks a StrictFIFO queue, and jobs in back-off.
    """

    tenant: str
    classes: Mapping[ClassKey, Reason]  # classes whose head did not fit
    next_turn: Reason  # the other classes (a classical queue admitted its one job)
    blocked: str | None = None  # StrictFIFO: every job but this one waits behind it...
    blocked_by: Reason | None = None  # ...for this reason
    backoff: Mapping[str, Reason] = field(default_factory=dict)  # job id -> its reason

    def of_class(self, key: ClassKey) -> Reason:
        """The reason of every job of class ``key`` except the blocking head and jobs in
        back-off."""
        if self.blocked_by is not None:
            return self.blocked_by
        return self.classes.get(key, self.next_turn)

    def of(self, job_id: str, key: ClassKey) -> Reason:
        """The reason of job ``job_id`` of class ``key``."""
        found = self.backoff.get(job_id)
        if found is not None:
            return found
        if job_id == self.blocked:
            return self.classes.get(key, self.next_turn)
        return self.of_class(key)


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
    - ``usage``: per tenant, keyed by tenant name;
    - ``reasons``: per tenant looked at, why its jobs wait, by equivalence class (filled when
      the decision explains: :class:`WaitReasons`).
    """

    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    waiting: Mapping[str, Waiting]
    allocations: Mapping[str, Allocation]
    usage: Mapping[str, TenantUsage]
    reasons: Mapping[str, WaitReasons] = field(default_factory=dict)
