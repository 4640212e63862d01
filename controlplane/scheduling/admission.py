"""Admission: which pending jobs start now, which running jobs make room, who waits and why.

One pass over the pending jobs, O(n log t) for n pending jobs of t tenants:

1. Put the running jobs in a :class:`~.quota.Ledger`.
2. Order each tenant's queue by priority (highest first), then submit time, then id.
3. Serve tenants from a heap ordered by fair share (:mod:`.fairshare`), then by the priority and
   submit time of their next job, so that between tenants of equal share the more urgent job
   goes first. Each turn looks at one job of the tenant with the lowest share:
   - it fits: admit it, update the ledger, the tenant's share grows;
   - it does not fit but preemption (:mod:`.preemption`) makes room: admit it with its victims;
   - otherwise it waits; in a StrictFIFO queue every job behind it waits too ("blocked"),
     in a BestEffortFIFO queue the tenant's next job gets its turn.
   A peer whose borrowed slots a reclaim just took is re-keyed by its lower share.
4. Number the waiting jobs of each tenant in queue order and write their reasons.

Each job is looked at once. Use only grows during a pass, so a job that did not fit when its
turn came would not fit later in the pass either; the one exception is a preemption that frees
more than its preemptor takes, and a job passed over before it gets its turn next decision.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import reasons
from .fairshare import share
from .preemption import Preemptor
from .quota import SLOTS, Ledger
from .types import (
    Admission,
    JobRequest,
    Preemption,
    QueuePolicy,
    RunningJob,
    Snapshot,
    WaitCode,
    Waiting,
)


def queue_order(job: JobRequest) -> tuple[int, float, str]:
    """Sort key of a tenant's queue: priority (highest first), then submit time, then id."""
    return (-job.priority, job.submit_time, job.id)


@dataclass(kw_only=True, slots=True)
class Outcome:
    """The result of one admission pass; ``ledger`` holds the use after it."""

    admitted: list[JobRequest] = field(default_factory=list)
    admissions: list[Admission] = field(default_factory=list)
    victims: list[RunningJob] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    ledger: Ledger


def admit(snapshot: Snapshot) -> Outcome:
    """Run one admission pass over ``snapshot`` (see the module docstring)."""
    ledger = Ledger(snapshot.cluster, snapshot.tenants)
    for running in snapshot.running:
        ledger.add(running)
    queues: dict[str, list[JobRequest]] = {}
    for job in snapshot.pending:
        queues.setdefault(job.tenant, []).append(job)
    for queue in queues.values():
        queue.sort(key=queue_order)
    return _Pass(ledger, queues, snapshot.running).run()


class _Pass:
    def __init__(
        self, ledger: Ledger, queues: dict[str, list[JobRequest]], running: Sequence[RunningJob]
    ) -> None:
        self.ledger = ledger
        self.queues = queues
        self.preemptor = Preemptor(ledger, running)
        self.outcome = Outcome(ledger=ledger)
        # Per job id: (code, detail) of jobs that wait; numbered at the end.
        self.details: dict[str, tuple[WaitCode, str]] = {}
        self.heap: list[tuple[float, float, int, float, str, str, int]] = []
        self.cursor = dict.fromkeys(queues, 0)  # index of each tenant's next job
        # A tenant's heap entry is valid only with its latest version: when a reclaim lowers a
        # peer's share, the peer is pushed again and its older entry is skipped.
        self.version = dict.fromkeys(queues, 0)

    def run(self) -> Outcome:
        for tenant in self.queues:
            self._push(tenant)
        while self.heap:
            *_, tenant, version = heapq.heappop(self.heap)
            if version != self.version[tenant]:
                continue
            queue, index = self.queues[tenant], self.cursor[tenant]
            if not self._turn(queue[index]) and self._strict(tenant):
                self._block(queue, index)
                self.cursor[tenant] = len(queue)
                continue
            self.cursor[tenant] = index + 1
            if index + 1 < len(queue):
                self._push(tenant)
        self._number()
        return self.outcome

    def _push(self, tenant: str) -> None:
        """Queue the tenant's turn for its next job, keyed by its share now."""
        head = self.queues[tenant][self.cursor[tenant]]
        borrowing, dominant = share(self.ledger.account(tenant), self.ledger)
        self.version[tenant] += 1
        key = (borrowing, dominant, -head.priority, head.submit_time, head.id)
        heapq.heappush(self.heap, (*key, tenant, self.version[tenant]))

    def _reshare(self, tenant: str) -> None:
        """A reclaim took jobs of ``tenant``: its share fell, so it may be served sooner."""
        if tenant in self.queues and self.cursor[tenant] < len(self.queues[tenant]):
            self._push(tenant)

    def _strict(self, tenant: str) -> bool:
        return self.ledger.account(tenant).quota.queue_policy is QueuePolicy.STRICT_FIFO

    def _turn(self, job: JobRequest) -> bool:
        """Admit ``job`` if it fits (preempting if need be) and return True, else record why it
        waits and return False."""
        code = self.ledger.check(job)
        victims: list[RunningJob] = []
        if code is not None and code is not WaitCode.TOO_LARGE:
            found = self.preemptor.find(job)
            if found is not None:
                victims, code = found, None
        account = self.ledger.account(job.tenant)
        if code is not None:
            self.details[job.id] = (code, reasons.waiting(code, job, account, self.ledger))
            return False
        self.ledger.add(job)
        self._record(job, victims)
        return True

    def _record(self, job: JobRequest, victims: list[RunningJob]) -> None:
        account = self.ledger.account(job.tenant)
        slots = account.dims[SLOTS]
        self.outcome.admitted.append(job)
        self.outcome.admissions.append(
            Admission(
                job_id=job.id,
                tenant=job.tenant,
                slots=job.slots,
                borrowed_slots=round(slots.borrowed_at(slots.used)),
                preempts=tuple(v.id for v in victims),
                reason=reasons.admitted(account, len(victims)),
            )
        )
        for peer in {v.tenant for v in victims} - {job.tenant}:
            self._reshare(peer)
        for victim in victims:
            reclaim = victim.tenant != job.tenant
            self.outcome.victims.append(victim)
            self.outcome.preemptions.append(
                Preemption(
                    job_id=victim.id,
                    tenant=victim.tenant,
                    by_job_id=job.id,
                    reclaim=reclaim,
                    reason=reasons.preempted(victim, job, reclaim, account.cohort),
                )
            )

    def _block(self, queue: list[JobRequest], index: int) -> None:
        head = queue[index]
        detail = reasons.blocked(head)
        for job in queue[index + 1 :]:
            self.details[job.id] = (WaitCode.BLOCKED_BY_HEAD, detail)

    def _number(self) -> None:
        waiting = self.outcome.waiting
        for tenant, queue in self.queues.items():
            left = [job for job in queue if job.id in self.details]
            for position, job in enumerate(left, start=1):
                code, detail = self.details[job.id]
                waiting[job.id] = Waiting(
                    job_id=job.id,
                    tenant=tenant,
                    code=code,
                    position=position,
                    queue_length=len(left),
                    reason=reasons.with_position(detail, position, len(left)),
                )
