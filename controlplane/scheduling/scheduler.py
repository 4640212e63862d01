"""The one entry point the control plane calls: :func:`schedule`."""

from __future__ import annotations

from .admission import Outcome, Queues
from .bandwidth import allocate
from .quota import BANDWIDTH, SLOTS
from .types import Allocation, Decision, Snapshot, TenantUsage


def schedule(snapshot: Snapshot, now: float) -> Decision:
    """Decide admissions, preemptions, waiting reasons and bandwidth for ``snapshot`` at ``now``.

    Pure: reads the snapshot, returns a :class:`~.types.Decision`, changes nothing. Raises
    ``ValueError`` if a job id or a tenant name appears twice. The caller applies the decision
    in this order: preempt the victims (checkpoint, requeue), admit the admissions, write every
    allocation and every waiting reason.
    """
    _check_unique(snapshot)
    return decide(Queues.of(snapshot, now), now, explain=True)


def decide(
    queues: Queues, now: float, *, explain: bool = False, explain_looked: bool = False
) -> Decision:
    """One decision of ``queues`` (:meth:`Queues.decide`, applied to it), with the bandwidth
    of every job that holds slots after it and each tenant's use.

    A caller that keeps ``queues`` between decisions (told of every arrival, end and change)
    gets the decision :func:`schedule` would give from a snapshot of the same jobs; its
    ``waiting`` then holds the jobs of the tenants looked at (``explain_looked``) or only the
    class heads tried.
    """
    outcome = queues.decide(now, explain=explain, explain_looked=explain_looked)
    ledger = queues.ledger
    placements = {a.job_id: a.placement for a in outcome.admissions if a.placement is not None}
    allocations = allocate(
        cluster=ledger.cluster,
        tenants=queues.tenants,
        running=list(queues.running.values()),
        now=now,
        placements=placements,
    )
    return Decision(
        admissions=tuple(outcome.admissions),
        preemptions=tuple(outcome.preemptions),
        waiting=outcome.waiting,
        allocations=allocations,
        usage=_usage(outcome, allocations),
        reasons=outcome.reasons,
    )


def _check_unique(snapshot: Snapshot) -> None:
    names = [t.name for t in snapshot.tenants]
    if len(set(names)) != len(names):
        raise ValueError("a tenant appears more than once in the snapshot")
    seen: set[str] = set()
    for job in (*snapshot.pending, *snapshot.running):
        if job.id in seen:
            raise ValueError(f"job id {job.id} appears more than once in the snapshot")
        seen.add(job.id)


def _usage(outcome: Outcome, allocations: dict[str, Allocation]) -> dict[str, TenantUsage]:
    """Return every tenant's use after the decision (tenants unknown to the snapshot too)."""
    allocated: dict[str, float] = {}
    for a in allocations.values():
        allocated[a.tenant] = allocated.get(a.tenant, 0.0) + a.bps
    waiting: dict[str, int] = {}
    for w in outcome.waiting.values():
        waiting[w.tenant] = waiting.get(w.tenant, 0) + 1
    usage: dict[str, TenantUsage] = {}
    for name, account in outcome.ledger.accounts.items():
        slots, bandwidth = account.dims[SLOTS], account.dims[BANDWIDTH]
        bps = allocated.get(name, 0.0)
        usage[name] = TenantUsage(
            tenant=name,
            slots_used=round(slots.used),
            slots_nominal=round(slots.nominal),
            slots_borrowed=round(slots.borrowed_at(slots.used)),
            floor_bps_reserved=bandwidth.used,
            bandwidth_bps=bps,
            bandwidth_nominal_bps=bandwidth.nominal,
            bandwidth_borrowed_bps=max(0.0, bps - bandwidth.nominal),
            running_jobs=account.jobs,
            waiting_jobs=waiting.get(name, 0),
        )
    return usage
