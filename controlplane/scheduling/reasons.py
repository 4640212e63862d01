"""Sentences a user reads on the job page: why a job waits, was admitted or was preempted."""

from __future__ import annotations

from .quota import BANDWIDTH, SLOTS, Account, Ledger
from .types import JobRequest, PriorityClass, WaitCode
from .units import bandwidth as bandwidth  # re-exported: callers format bit/s with it


def _slots(account: Account) -> str:
    dim = account.dims[SLOTS]
    return f"tenant {account.name} at {dim.used:.0f}/{dim.nominal:.0f} slots"


def _lendable(account: Account) -> float:
    """How many more slots the tenant could still borrow (for display)."""
    dim = account.dims[SLOTS]
    pool = dim.pool
    if pool is None:
        return 0.0
    idle = pool.lendable - dim.lendable_at(dim.used) - pool.borrowed  # others' idle, unborrowed
    return max(0.0, min(dim.borrow_limit - dim.borrowed_at(dim.used), idle))


def waiting(code: WaitCode, job: JobRequest, account: Account, ledger: Ledger) -> str:
    """Return why ``job`` cannot be admitted now, without the queue position."""
    bw = account.dims[BANDWIDTH]
    floor = bandwidth(job.bandwidth_floor_bps)
    if code is WaitCode.TOO_LARGE:
        needs = f"{job.slots} slots" + (f" and a {floor} floor" if job.bandwidth_floor_bps else "")
        return (
            f"needs {needs}, more than tenant {account.name} can ever hold "
            f"(cluster: {ledger.cluster.slots} slots, {bandwidth(ledger.cluster.fabric_bps)})"
        )
    if code is WaitCode.TENANT_JOBS:
        return f"tenant {account.name} runs {account.jobs}/{account.quota.max_running_jobs} jobs"
    if code is WaitCode.TENANT_SLOTS:
        return f"{_slots(account)}, needs {job.slots}"
    if code is WaitCode.COHORT_SLOTS:
        lend = _lendable(account)
        return f"{_slots(account)}, needs {job.slots}; cohort {account.cohort} can lend {lend:.0f}"
    used, capacity = ledger.used[SLOTS], ledger.capacity[SLOTS]
    full = used + job.slots > capacity
    if code is WaitCode.CLUSTER_SLOTS and full:
        return f"cluster at {used:.0f}/{capacity:.0f} slots, needs {job.slots}"
    if code in NODE_CODES:
        return _unplaced(code, job, ledger)
    reserved = f"{bandwidth(bw.used)}/{bandwidth(bw.nominal)} of floors reserved"
    if code is WaitCode.TENANT_BANDWIDTH:
        return f"floor {floor} cannot be guaranteed: tenant {account.name} has {reserved}"
    if code is WaitCode.CLUSTER_BANDWIDTH:
        fabric = f"{bandwidth(ledger.used[BANDWIDTH])}/{bandwidth(ledger.capacity[BANDWIDTH])}"
        return f"floor {floor} cannot be guaranteed: fabric has {fabric} of floors reserved"
    raise AssertionError(f"no sentence for {code}")  # BLOCKED_BY_HEAD is written by admission


# Codes a cluster with nodes gives when the job fits the totals but cannot be placed.
NODE_CODES = frozenset({WaitCode.CLUSTER_SLOTS, WaitCode.CLUSTER_BANDWIDTH, WaitCode.NODE_SELECTOR})


def _unplaced(code: WaitCode, job: JobRequest, ledger: Ledger) -> str:
    if ledger.topology is not None:
        return ledger.topology.why_not(job, code)
    labels = ", ".join(f"{k}={v}" for k, v in job.selector_key)
    return f"asks for nodes with label {labels}; the cluster was given without nodes"


def blocked(head: JobRequest) -> str:
    """Why a job waits behind ``head``. The head is not named: it changes with every admission,
    and a store would rewrite every job behind it each time (its queue position, 1, is read
    live like every job's)."""
    return f"behind the head of tenant {head.tenant}'s StrictFIFO queue, which does not fit yet"


def backoff(job: JobRequest, until: float, *, launch: bool = False) -> str:
    """Why ``job`` waits until ``until``: its evictions, or (``launch``) its launch faults."""
    count = job.launch_faults if launch else job.evictions
    times = "once" if count == 1 else f"{count} times"
    if launch:
        return f"launch failed {times} in a row (platform fault): backing off until t={until:.3f}"
    return f"evicted {times}: backing off until t={until:.3f}"


def next_turn(tenant: str) -> str:
    return f"tenant {tenant}'s queue admitted one job this decision; its next turn is the next"


def with_position(detail: str, position: int, length: int) -> str:
    return f"waiting: {detail}; position {position} of {length}"


def admitted(account: Account, victims: int) -> str:
    slots = account.dims[SLOTS]
    text = f"admitted: {_slots(account)}"
    borrowed = slots.borrowed_at(slots.used)
    if borrowed > 0:
        text += f", borrowing {borrowed:.0f} from cohort {account.cohort}"
    if victims:
        text += f"; preempting {victims} job{'s' if victims > 1 else ''}"
    return text


def preempted(victim: JobRequest, by: JobRequest, reclaim: bool, cohort: str | None) -> str:
    if reclaim:
        return (
            f"preempted: tenant {by.tenant} reclaims quota lent to tenant {victim.tenant} "
            f"in cohort {cohort} for job {by.id}"
        )
    return (
        f"preempted: job {by.id} ({PriorityClass.label(by.priority)}) of tenant {by.tenant} "
        f"needs the room; this job is {PriorityClass.label(victim.priority)}"
    )
