"""Admission: which pending jobs start now, which running jobs make room, who waits and why.

:class:`Queues` keeps the scheduler's state between decisions (the ledger of running jobs, the
tenants' queues bucketed by equivalence class, jobs in back-off) and knows which tenants a
change may have unblocked (*dirty* tenants). A decision (:meth:`Queues.decide`):

1. Releases the evicted jobs whose back-off ran out; when a preemption protection has run out
   since the last decision, every tenant is looked at again.
2. Serves the dirty tenants from a heap, by their cohort's :class:`~.types.AdmissionOrder`:
   fair share (:mod:`.fairshare`, then the priority and submit time of the next job) or Kueue's
   classical order (heads that fit without borrowing first, then priority, then submit time;
   one admission per queue per decision). Each turn looks at the head of one equivalence class
   (:mod:`.backlog`) of the tenant:
   - it fits: admit it, update the ledger, the tenant's share grows;
   - it does not fit but preemption (:mod:`.preemption`) makes room: admit it with its victims;
   - otherwise its whole class waits; in a StrictFIFO queue every job behind it waits too
     ("blocked"), in a BestEffortFIFO queue the tenant's next class gets its turn.
3. Moves admitted jobs to running and victims back to their queues (with one more eviction).

Use only grows during a pass, so a class that did not fit when its turn came would not fit later
in the pass either. Between decisions a tenant is looked at again only when something that
stopped it may have changed: a job of its own arrived or left; a job of its cohort left while
it waited on the cohort's idle quota, or a peer borrowed (it may reclaim); a job left that
freed as much of the cluster as one of its classes needed; a protection or back-off ran out;
or the cluster changed. So
a decision costs O(d x c log t) for d dirty tenants with c classes each, whatever the backlog.

``Queues.of(snapshot).decide(now, explain=True)`` is the one-shot form (what
:func:`~.scheduler.schedule` runs): a fresh :class:`Queues` from a snapshot, every tenant
dirty, and a reason and queue position for every waiting job (O(n log n) for n pending jobs).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import reasons
from .backlog import TenantQueue, class_of, queue_order
from .fairshare import share
from .preemption import Preemptor
from .quota import BANDWIDTH, EPSILON, SLOTS, Account, Ledger, demand
from .types import (
    Admission,
    AdmissionOrder,
    ClassKey,
    Cluster,
    JobRequest,
    Options,
    Placement,
    Preemption,
    QueuePolicy,
    RunningJob,
    Snapshot,
    TenantQuota,
    WaitCode,
    Waiting,
    WaitReasons,
)

__all__ = ["Outcome", "Queues", "queue_order"]

# Wait codes that only the cluster's free capacity can lift.
CLUSTER_CODES = frozenset({WaitCode.CLUSTER_SLOTS, WaitCode.CLUSTER_BANDWIDTH})
# Wait codes no preemption can lift: the job is too large, or no node carries its labels.
UNPREEMPTABLE = frozenset({WaitCode.TOO_LARGE, WaitCode.NODE_SELECTOR})


@dataclass(kw_only=True, slots=True)
class Outcome:
    """The result of one admission pass; ``ledger`` holds the use after it. ``waiting`` holds
    every waiting job after ``decide(explain=True)``, and is empty after a
    plain :meth:`Queues.decide`: the sentences cost more than the decision. ``reasons`` holds
    why each tenant looked at waits, by equivalence class, when the decision explains."""

    admitted: list[JobRequest] = field(default_factory=list)
    admissions: list[Admission] = field(default_factory=list)
    victims: list[RunningJob] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    reasons: dict[str, WaitReasons] = field(default_factory=dict)
    ledger: Ledger


class Queues:
    """The scheduler's state between decisions; see the module docstring."""

    def __init__(
        self, cluster: Cluster, tenants: Iterable[TenantQuota], options: Options | None = None
    ) -> None:
        self.tenants = list(tenants)  # as given (the ledger adds unknown ones, at zero quota)
        self.ledger = Ledger(cluster, self.tenants)
        self.options = options or Options()
        self.running: dict[str, RunningJob] = {}
        self.queues: dict[str, TenantQueue] = {}
        # (until, id, push count, job): the count keeps a job withdrawn and submitted again
        # from being compared with its stale entry.
        self.backoff: list[tuple[float, str, int, JobRequest]] = []
        self.pushes = itertools.count()
        self.in_backoff: dict[str, JobRequest] = {}
        self.dirty: set[str] = set()
        # Tenants last stopped by the cluster's capacity, with the least (slots, floor) that
        # one of their classes needed: a job ending wakes them only if that much is free.
        self.on_cluster: dict[str, list[float]] = {}
        self.on_cohort: set[str] = set()  # tenants last stopped by their cohort's idle quota
        self.recheck_at = math.inf  # when a preemption protection that refused a victim ends

    @classmethod
    def of(cls, snapshot: Snapshot, now: float = -math.inf) -> Queues:
        """The state a snapshot describes: its running jobs held, its pending jobs queued."""
        queues = cls(snapshot.cluster, snapshot.tenants, snapshot.options)
        for running in snapshot.running:
            queues.hold(running)
        for job in snapshot.pending:
            queues.submit(job, now)
        return queues

    # --- events ---------------------------------------------------------------------------

    def submit(self, job: JobRequest, now: float = -math.inf) -> None:
        """Queue ``job`` (a new job, or a victim back from eviction, still in back-off)."""
        until = self.options.backoff_until(job)
        if until > now:
            self.in_backoff[job.id] = job
            heapq.heappush(self.backoff, (until, job.id, next(self.pushes), job))
            return
        self.queues.setdefault(job.tenant, TenantQueue()).push(job)
        self.dirty.add(job.tenant)

    def withdraw(self, job_id: str, tenant: str) -> None:
        """Forget a waiting job (cancelled)."""
        if self.in_backoff.pop(job_id, None) is None and tenant in self.queues:
            self.queues[tenant].discard(job_id)
            self.dirty.add(tenant)  # it may have been the head of a StrictFIFO queue

    def pending(self, job_id: str, tenant: str) -> JobRequest | None:
        """The waiting job ``job_id`` of ``tenant`` (queued or in back-off), or None."""
        found = self.in_backoff.get(job_id)
        if found is None and tenant in self.queues:
            found = self.queues[tenant].live.get(job_id)
        return found

    def touch(self, tenant: str) -> None:
        """Look at ``tenant`` in the next decision (and explain its waiting jobs then)."""
        self.dirty.add(tenant)

    def hold(self, job: RunningJob) -> None:
        """Count ``job`` as holding slots (a snapshot's running job)."""
        self.running[job.id] = job
        self.ledger.add(job)

    def release(self, job_id: str) -> None:
        """A running job ended: its slots and floor are free again."""
        job = self.running.pop(job_id)
        self.ledger.remove(job)
        self._freed(job.tenant)

    def resize(self, cluster: Cluster) -> None:
        """The cluster changed (a node came or went, a link changed): look at everyone again."""
        self.ledger.resize(cluster)
        topology = self.ledger.topology
        if topology is not None:  # placements held before the cluster had nodes count now
            for job in self.running.values():
                if job.placement is not None and job.id not in topology.holding:
                    topology.hold(job.id, job.placement, job.bandwidth_floor_bps)
        self.dirty.update(self.queues)

    def next_wakeup(self) -> float:
        """Return when a decision could admit something with no other event (inf: never)."""
        first = self.backoff[0][0] if self.backoff else math.inf
        return min(first, self.recheck_at)

    def pending_count(self) -> int:
        return sum(len(q) for q in self.queues.values()) + len(self.in_backoff)

    def _freed(self, *tenants: str) -> None:
        """Jobs of ``tenants`` released what they held: mark who may now fit as dirty.

        One sweep for any number of tenants (a decision's victims are freed together: the
        ledger already holds all their releases, so one sweep marks what one per victim would).
        """
        self.dirty.update(tenants)
        ledger = self.ledger
        free = [c - u for c, u in zip(ledger.capacity, ledger.used, strict=True)]
        for name, need in list(self.on_cluster.items()):
            # (A cluster with nodes has no pooled fabric: its free fabric is inf, and a need
            # of inf stands for a resource the tenant did not wait on.)
            if any(n < math.inf and n <= f + EPSILON for n, f in zip(need, free, strict=True)):
                self.dirty.add(name)
        self.dirty.update(self.waiting_in_cohorts_of(tenants))

    def waiting_in_cohorts_of(self, tenants: Iterable[str]) -> set[str]:
        """Tenants refused for want of cohort room in a cohort of one of ``tenants``."""
        ledger = self.ledger
        cohorts = {ledger.account(tenant).cohort for tenant in tenants} - {None}
        if not cohorts:
            return set()
        return {n for n in self.on_cohort if ledger.account(n).cohort in cohorts}

    # --- decisions ------------------------------------------------------------------------

    def decide(self, now: float, *, explain: bool = False, explain_looked: bool = False) -> Outcome:
        """Admit what fits at ``now`` and apply it to this state (see the module docstring).

        With ``explain``, every tenant is looked at and every waiting job gets a reason and a
        queue position; otherwise only dirty tenants are, and ``waiting`` holds only the class
        heads looked at. With ``explain_looked``, ``reasons`` says why the jobs of the tenants
        looked at (and of those touched, whose jobs may all be in back-off) wait, by
        equivalence class, and ``waiting`` stays empty: what changed is explained, at a cost
        that follows the classes looked at, not the jobs in them.
        """
        self._end_backoff(now)
        if explain or now >= self.recheck_at:
            self.dirty.update(self.queues)
            self.recheck_at = math.inf
        touched = self.dirty
        tenants = [t for t in sorted(touched) if self.queues.get(t)]
        self.dirty = set()
        turns = _Pass(self, now, tenants, explain=explain or explain_looked)
        outcome = turns.run()
        if explain:
            turns.explain_all()
        elif explain_looked:
            turns.explain_reasons(touched | turns.version.keys())
        self._apply(outcome, now, turns.preemptor)
        return outcome

    def _end_backoff(self, now: float) -> None:
        while self.backoff and self.backoff[0][0] <= now:
            _, job_id, _, job = heapq.heappop(self.backoff)
            if self.in_backoff.get(job_id) is job:
                del self.in_backoff[job_id]
                self.submit(job, now)

    def _apply(self, outcome: Outcome, now: float, preemptor: Preemptor | None) -> None:
        for job, admission in zip(outcome.admitted, outcome.admissions, strict=True):
            # The pass has added it to the ledger, on its placement.
            self.running[job.id] = job.started(now, admission.placement)
        for victim in outcome.victims:
            self.running.pop(victim.id)  # the preemptor has removed it from the ledger
            self.submit(victim.requeued(now), now)
        if outcome.victims:
            self._freed(*{victim.tenant for victim in outcome.victims})
        if preemptor is not None:
            self.recheck_at = min(self.recheck_at, preemptor.protection_ends)


TurnKey = tuple[float, float, int, float, str]


class _Pass:
    """One decision's turns over the dirty tenants."""

    def __init__(self, state: Queues, now: float, tenants: list[str], *, explain: bool) -> None:
        self.state = state
        self.explain = explain  # write reasons (sentences cost more than the decision)
        self.ledger = state.ledger
        self.now = now
        self.tenants = tenants
        self.preemptor: Preemptor | None = None  # built on the first preemption search
        self.outcome = Outcome(ledger=state.ledger)
        # Per tenant: the classes that did not fit this pass, with (code, detail, head).
        self.failed: dict[str, dict[ClassKey, tuple[WaitCode, str, JobRequest]]] = {}
        # Per tenant: its classes not yet failed this pass, as a heap by their head's queue
        # order, so a turn finds the next head in O(log c) (entries may be stale: see _next).
        self.heads: dict[str, list[tuple[tuple[int, float, str], ClassKey]]] = {}
        self.blocked: dict[str, JobRequest] = {}  # StrictFIFO tenants stopped by their head
        self.done: set[str] = set()  # classical tenants that admitted their one job
        self.heap: list[tuple[float, float, int, float, str, str, int]] = []
        self.current: TurnKey = (-math.inf, -math.inf, 0, -math.inf, "")  # the turn being taken
        self.version = dict.fromkeys(tenants, 0)
        self.borrowing: set[str] = set()  # cohorts in which an admission of this pass borrows

    def run(self) -> Outcome:
        for tenant in self.tenants:
            self._enter(tenant)
        while self.heap:
            entry = heapq.heappop(self.heap)
            tenant, version = entry[5], entry[6]
            if version == self.version[tenant]:
                self.current = entry[:5]
                self._turn(tenant)
        return self.outcome

    def _enter(self, tenant: str) -> None:
        """Give ``tenant`` turns in this pass."""
        self.version.setdefault(tenant, 0)
        self.failed[tenant] = {}
        self.heads[tenant] = self._queue(tenant).class_heads()
        self.state.on_cluster.pop(tenant, None)
        self.state.on_cohort.discard(tenant)
        self._push(tenant)

    def _queue(self, tenant: str) -> TenantQueue:
        return self.state.queues[tenant]

    def _next(self, tenant: str) -> JobRequest | None:
        """The tenant's next job to try: the first head, in queue order, of a class that has
        not failed this pass (None: none left, or the tenant is blocked or done)."""
        if tenant in self.blocked or tenant in self.done:
            return None
        heads, queue, failed = self.heads[tenant], self._queue(tenant), self.failed[tenant]
        while heads:
            order, key = heads[0]
            job = queue.head(key) if key not in failed else None
            if job is not None and queue_order(job) == order:
                return job
            heapq.heappop(heads)
            if job is not None:  # the class's head changed (admitted): queue its new head
                heapq.heappush(heads, (queue_order(job), key))
        return None

    def _push(self, tenant: str) -> None:
        """Queue the tenant's turn for its next class head, keyed by its cohort's order."""
        head = self._next(tenant)
        if head is None:
            return
        self.version[tenant] += 1
        heapq.heappush(self.heap, (*self._key(tenant, head), tenant, self.version[tenant]))

    def _key(self, tenant: str, head: JobRequest) -> TurnKey:
        """Where ``tenant``'s turn for ``head`` comes in this pass: by its cohort's order (fair
        share, or non-borrowing first), then priority, submission and id."""
        account = self.ledger.account(tenant)
        if self.state.options.order(account.cohort) is AdmissionOrder.CLASSICAL:
            slots = account.dims[SLOTS]
            first, second = float(slots.used + head.slots > slots.nominal), 0.0
        else:
            first, second = share(account, self.ledger)
        return (first, second, -head.priority, head.submit_time, head.id)

    def _room_freed(self, victims: list[RunningJob]) -> None:
        """Victims freed room in the middle of this pass. A tenant not in the pass that waits
        for cohort or cluster room joins it if a decision from scratch would give it its turn
        after this one (one whose turn came earlier had it with no more room, and failed)."""
        state = self.state
        waiting = set(state.on_cluster) | state.waiting_in_cohorts_of(v.tenant for v in victims)
        for name in sorted(waiting - self.version.keys()):
            queue = state.queues.get(name)
            heads = queue.class_heads() if queue else []
            head = queue.head(heads[0][1]) if queue and heads else None
            if head is not None and self._key(name, head) > self.current:
                self._enter(name)

    def _reshare(self, tenant: str) -> None:
        """A reclaim took jobs of ``tenant``: its share fell, so it may be served sooner, and
        what the victims held (slots, a running-job count) may let its waiting jobs in. A
        tenant not looked at in this pass joins it now (a decision from scratch would serve
        it in this pass too)."""
        if tenant in self.version:
            self._push(tenant)
        elif self.state.queues.get(tenant):
            self._enter(tenant)

    def _turn(self, tenant: str) -> None:
        """Try the tenant's next class head, then queue its next turn."""
        job = self._next(tenant)
        if job is None:
            return
        if self._try(job):
            self._queue(tenant).discard(job.id)
            if self._classical(tenant):
                self.done.add(tenant)
                self.state.dirty.add(tenant)  # the rest of its queue gets the next decision
        elif self._strict(tenant):
            self.blocked[tenant] = job
        self._push(tenant)

    def _classical(self, tenant: str) -> bool:
        cohort = self.ledger.account(tenant).cohort
        return self.state.options.order(cohort) is AdmissionOrder.CLASSICAL

    def _strict(self, tenant: str) -> bool:
        return self.ledger.account(tenant).quota.queue_policy is QueuePolicy.STRICT_FIFO

    def _try(self, job: JobRequest) -> bool:
        """Admit ``job`` if it fits (preempting if need be) and return True, else record why
        its class waits and return False."""
        code = self.ledger.check(job)
        victims: list[RunningJob] = []
        searched = code is not None and code not in UNPREEMPTABLE
        if searched:
            found = self._preemptor().find(job)
            if found is not None:
                victims, code = found, None
        if code is not None:
            account = self.ledger.account(job.tenant)
            detail = reasons.waiting(code, job, account, self.ledger) if self.explain else ""
            self.failed[job.tenant][class_of(job)] = (code, detail, job)
            if code in CLUSTER_CODES:
                self._wait_on_cluster(job, code)
            elif code is WaitCode.COHORT_SLOTS:
                self.state.on_cohort.add(job.tenant)
            if searched:
                self._search_failed(job, account)
            self._may_reclaim(job, account)
            return False
        placement = self.ledger.placement(job)
        # On a cluster with nodes the ledger counts the job on its nodes, from its placement.
        self.ledger.add(job if placement is None else job.started(self.now, placement))
        self._record(job, victims, placement)
        return True

    def _search_failed(self, job: JobRequest, account: Account) -> None:
        """No victims let ``job`` in. Whatever its own refusal said (its running-job limit, its
        quota), the search may have run out of cohort room, so a job of the cohort ending may
        let a later search succeed: wake the tenant on those too. (Waking it on every cluster
        release as well made incremental decisions 1.6x slower at 10,000 pending.)"""
        if account.cohort is not None:
            self.state.on_cohort.add(job.tenant)

    def _may_reclaim(self, job: JobRequest, account: Account) -> None:
        """A job refused after a peer borrowed in this pass may reclaim from that peer at the
        next decision (the preemptor sees only jobs running before the pass): look at its
        tenant again then, if it would stay within its nominal quota (reclaim's condition).
        So may a job refused for want of cohort or cluster room: a peer's reclaim at the next
        decision frees room it may fit in (as ``_wake_cohort`` wakes those refused before the
        peer borrowed; a decision from scratch looks at them too)."""
        cohort = account.cohort
        if cohort not in self.borrowing:
            return
        state = self.state
        waits_for_room = job.tenant in state.on_cohort or job.tenant in state.on_cluster
        if waits_for_room or account.within_nominal_with(job):
            state.dirty.add(job.tenant)

    def _wait_on_cluster(self, job: JobRequest, code: WaitCode) -> None:
        need = self.state.on_cluster.setdefault(job.tenant, [math.inf, math.inf])
        r = SLOTS if code is WaitCode.CLUSTER_SLOTS else BANDWIDTH
        need[r] = min(need[r], demand(job)[r])

    def _preemptor(self) -> Preemptor:
        if self.preemptor is None:
            state = self.state
            self.preemptor = Preemptor(self.ledger, state.running.values(), self.now, state.options)
        return self.preemptor

    def _record(
        self, job: JobRequest, victims: list[RunningJob], placement: Placement | None
    ) -> None:
        account = self.ledger.account(job.tenant)
        slots = account.dims[SLOTS]
        borrowed = round(slots.borrowed_at(slots.used))
        self.outcome.admitted.append(job)
        self.outcome.admissions.append(
            Admission(
                job_id=job.id,
                tenant=job.tenant,
                slots=job.slots,
                borrowed_slots=borrowed,
                preempts=tuple(v.id for v in victims),
                reason=reasons.admitted(account, len(victims)),
                placement=placement,
            )
        )
        if borrowed and account.cohort is not None:
            self._wake_cohort(account.cohort)  # peers may now reclaim what it borrows
            self.borrowing.add(account.cohort)  # and so may a peer refused later in this pass
        for peer in {v.tenant for v in victims} - {job.tenant}:
            self._reshare(peer)
        for victim in victims:
            self._record_victim(victim, job, account.cohort)
        if victims:
            self._room_freed(victims)

    def _wake_cohort(self, cohort: str) -> None:
        """A peer borrows now: members refused for want of cohort or cluster room may reclaim
        (the others were refused by their own quota, which a reclaim does not change)."""
        state = self.state
        for name in state.on_cohort | state.on_cluster.keys():
            if self.ledger.account(name).cohort == cohort and state.queues.get(name):
                state.dirty.add(name)

    def _record_victim(self, victim: RunningJob, by: JobRequest, cohort: str | None) -> None:
        reclaim = victim.tenant != by.tenant
        self.outcome.victims.append(victim)
        self.outcome.preemptions.append(
            Preemption(
                job_id=victim.id,
                tenant=victim.tenant,
                by_job_id=by.id,
                reclaim=reclaim,
                reason=reasons.preempted(victim, by, reclaim, cohort),
                work_lost_s=victim.work_lost(self.now),
            )
        )

    # --- reasons for every waiting job (explain mode) --------------------------------------

    def explain_all(self) -> None:
        """Give every waiting job of every tenant a code, a reason and its queue position."""
        state = self.state
        by_tenant: dict[str, list[JobRequest]] = {}
        for tenant, queue in state.queues.items():
            by_tenant.setdefault(tenant, []).extend(queue.jobs())
        for job in state.in_backoff.values():
            by_tenant.setdefault(job.tenant, []).append(job)
        self.explain_reasons(by_tenant)
        for tenant, jobs in by_tenant.items():
            why = self.outcome.reasons[tenant]
            jobs.sort(key=queue_order)
            for position, job in enumerate(jobs, start=1):
                code, detail = why.of(job.id, class_of(job))
                self.outcome.waiting[job.id] = Waiting(
                    job_id=job.id,
                    tenant=tenant,
                    code=code,
                    position=position,
                    queue_length=len(jobs),
                    reason=reasons.with_position(detail, position, len(jobs)),
                    detail=f"waiting: {detail}",
                )

    def explain_reasons(self, tenants: Iterable[str]) -> None:
        """Say why the jobs of ``tenants`` wait, by equivalence class (``outcome.reasons``)."""
        wanted = set(tenants)
        backoff: dict[str, dict[str, tuple[WaitCode, str]]] = {t: {} for t in wanted}
        options = self.state.options
        for job in self.state.in_backoff.values():
            if job.tenant in wanted:
                until = options.backoff_until(job)
                launch = until == options.launch_backoff_until(job)
                why = (WaitCode.BACKOFF, reasons.backoff(job, until, launch=launch))
                backoff[job.tenant][job.id] = why
        for tenant in wanted:
            head = self.blocked.get(tenant)
            failed = self.failed.get(tenant, {})
            behind = None if head is None else (WaitCode.BLOCKED_BY_HEAD, reasons.blocked(head))
            self.outcome.reasons[tenant] = WaitReasons(
                tenant=tenant,
                classes={key: (code, detail) for key, (code, detail, _) in failed.items()},
                # A classical queue that admitted its one job this decision: the rest wait
                # their turn.
                next_turn=(WaitCode.NEXT_TURN, reasons.next_turn(tenant)),
                blocked=None if head is None else head.id,
                blocked_by=behind,
                backoff=backoff[tenant],
            )
