"""Choosing victims so that a job that does not fit can run.

Two rules, as in Kueue:

1. *Reclaim within a cohort*: a job whose tenant stays at or below its nominal quota (slots and
   floors) after admission may preempt jobs of cohort peers that are borrowing (holding more
   slots than their nominal), whatever their priority: lent quota is returned on demand. A
   peer's jobs are taken only while the peer still borrows. These victims are tried before
   rule 2's.
2. *Priority within a tenant*, as the tenant's :class:`~.types.PreemptionPolicy` allows: running
   jobs of its own tenant with a strictly lower priority, or also of equal priority submitted
   later (``LowerOrNewerEqualPriority``); ``Never`` turns off both rules for the tenant's jobs.

In both rules victims are ordered lowest priority first, then least work lost (run time since
the last checkpoint), then newest, and taken until the job fits; then every victim that turns
out not to be needed is kept running (trying the later picks first), which leaves the fewest
victims the order allows.

Two protections stop preemption from thrashing (see :class:`~.types.Options`):

- a job admitted less than ``min_run_time_s`` ago is not a victim unless the preemptor is
  critical;
- a job already evicted ``eviction_limit`` (k) times is a victim only of a job of strictly
  higher priority submitted after the victim's last admission. So while no new higher-priority
  job arrives, a job is evicted at most k times: each eviction past the k-th needs a preemptor
  that arrived during the victim's current run.
"""

from __future__ import annotations

from collections.abc import Iterable

from .fairshare import share
from .placement import Selector
from .quota import EPSILON, RESOURCES, Account, Ledger
from .types import (
    JobRequest,
    Options,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    RunningJob,
    Snapshot,
)


def victim_order(job: RunningJob, now: float = 0.0) -> tuple[int, float, float, str]:
    """Sort key of victims: lowest priority first, then least work lost, then newest."""
    return (job.priority, job.work_lost(now), -job.started_at, job.id)


def newest_first(jobs: list[RunningJob]) -> list[RunningJob]:
    """Return ``jobs`` newest first: latest ``started_at``, then latest in queue order."""
    jobs = sorted(jobs, key=lambda j: j.id, reverse=True)
    return sorted(jobs, key=lambda j: (-j.started_at, j.priority, -j.submit_time))


def protected(victim: RunningJob, by: JobRequest, now: float, options: Options) -> bool:
    """Return True when ``by`` may not preempt ``victim`` whatever the quota says."""
    young = now - victim.started_at < options.min_run_time_s
    if young and by.priority < PriorityClass.CRITICAL:
        return True
    if victim.evictions >= options.eviction_limit:
        return not (by.priority > victim.priority and by.submit_time > victim.started_at)
    return False


def _own_victim(victim: RunningJob, by: JobRequest, policy: PreemptionPolicy) -> bool:
    """Return True when the tenant's policy lets ``by`` preempt its own ``victim``."""
    if victim.priority < by.priority:
        return policy is not PreemptionPolicy.NEVER
    return (
        policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
        and victim.priority == by.priority
        and victim.submit_time > by.submit_time
    )


class Preemptor:
    """Victim search over the running jobs of one snapshot.

    The ledger is shared with admission: a successful :meth:`find` leaves the victims removed
    from it, so the caller only has to add the preemptor.
    """

    def __init__(
        self,
        ledger: Ledger,
        running: Iterable[RunningJob],
        now: float = 0.0,
        options: Options | None = None,
    ) -> None:
        self.ledger = ledger
        self.now = now
        self.options = options or Options()
        self.by_tenant: dict[str, list[RunningJob]] = {}
        for job in running:
            self.by_tenant.setdefault(job.tenant, []).append(job)
        for jobs in self.by_tenant.values():
            jobs.sort(key=self.order)
        self.cohort_members: dict[str, list[Account]] = {}
        for account in ledger.accounts.values():
            if account.cohort is not None:
                self.cohort_members.setdefault(account.cohort, []).append(account)
        self.gone: set[str] = set()
        # Per tenant, (priority, submit time, slots, floor, node selector) of searches that
        # failed: a later job of the same tenant that is no higher, no newer, no smaller and
        # asks for the same nodes has no candidate the failed one lacked and needs more, so it
        # is not searched again. Cleared when a search in the cohort succeeds.
        self.failed: dict[str, list[tuple[int, float, int, float, Selector]]] = {}
        # Earliest time a protection that refused a victim runs out (inf: none did).
        self.protection_ends = float("inf")

    def order(self, job: RunningJob) -> tuple[int, float, float, str]:
        return victim_order(job, self.now)

    def find(self, job: JobRequest) -> list[RunningJob] | None:
        """Return the victims that let ``job`` fit (removed from the ledger), or None."""
        policy = self.ledger.account(job.tenant).quota.preemption
        if policy is PreemptionPolicy.NEVER or self._known_to_fail(job, policy):
            return None
        candidates = self._candidates(job, policy)
        victims = self._take_until_fit(job, candidates) if candidates else None
        if victims is None:
            self.failed.setdefault(job.tenant, []).append(
                (
                    job.priority,
                    job.submit_time,
                    job.slots,
                    job.bandwidth_floor_bps,
                    job.selector_key,
                )
            )
            return None
        self._forget_failures(job.tenant)
        self.gone.update(v.id for v in victims)
        return victims

    def _known_to_fail(self, job: JobRequest, policy: PreemptionPolicy) -> bool:
        newer_equal = policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
        return any(
            (job.priority < p or (job.priority == p and not newer_equal))
            and job.submit_time <= t
            and job.slots >= s
            and job.bandwidth_floor_bps >= f
            and job.selector_key == selector
            for p, t, s, f, selector in self.failed.get(job.tenant, ())
        )

    def _forget_failures(self, tenant: str) -> None:
        cohort = self.ledger.account(tenant).cohort
        if cohort is None:
            self.failed.pop(tenant, None)
            return
        for member in self.cohort_members.get(cohort, ()):
            self.failed.pop(member.name, None)

    def _allowed(self, victim: RunningJob, job: JobRequest) -> bool:
        if victim.id in self.gone:
            return False
        if protected(victim, job, self.now, self.options):
            self._note_protection(victim)
            return False
        return True

    def _note_protection(self, victim: RunningJob) -> None:
        ends = victim.started_at + self.options.min_run_time_s
        if ends > self.now:
            self.protection_ends = min(self.protection_ends, ends)

    def _candidates(self, job: JobRequest, policy: PreemptionPolicy) -> list[RunningJob]:
        """Return reclaimable peer jobs, then own jobs the policy allows, each in victim
        order."""
        own = []
        for r in self.by_tenant.get(job.tenant, ()):
            if r.priority > job.priority:
                break  # sorted by priority: no lower or equal priority job follows
            if _own_victim(r, job, policy) and self._allowed(r, job):
                own.append(r)
        account = self.ledger.account(job.tenant)
        if account.cohort is None or not account.within_nominal_with(job):
            return own
        peers: list[RunningJob] = []
        for member in self.cohort_members[account.cohort]:
            if member is not account and member.borrowing():
                peers.extend(
                    r for r in self.by_tenant.get(member.name, ()) if self._allowed(r, job)
                )
        return sorted(peers, key=self.order) + own

    def _take_until_fit(
        self, job: JobRequest, candidates: list[RunningJob]
    ) -> list[RunningJob] | None:
        ledger = self.ledger
        taken: list[RunningJob] = []
        for victim in candidates:
            # A peer's job is only taken while its tenant still borrows: reclaim stops at nominal.
            if victim.tenant != job.tenant and not ledger.account(victim.tenant).borrowing():
                continue
            ledger.remove(victim)
            taken.append(victim)
            if ledger.check(job) is None:
                return self._keep_unneeded(job, taken)
        for victim in taken:
            ledger.add(victim)
        return None

    def _keep_unneeded(self, job: JobRequest, taken: list[RunningJob]) -> list[RunningJob]:
        """Put back every victim the job can do without, later picks first (the last pick is
        needed by construction)."""
        needed = [taken[-1]]
        for victim in reversed(taken[:-1]):
            self.ledger.add(victim)
            if self.ledger.check(job) is None:
                continue
            self.ledger.remove(victim)
            needed.append(victim)
        needed.reverse()  # back in the order they were picked
        return needed


def over_quota(snapshot: Snapshot) -> tuple[Preemption, ...]:
    """Return the running jobs to preempt so that every tenant is back within its quota.

    For a site admin who lowered a quota below current use and chose "preempt now" ("apply at
    next admission" needs nothing: admission never admits above quota). Pending jobs are
    ignored. In three steps, each taking the fewest jobs in its order:

    1. each tenant above nominal + borrowing limit, or above max running jobs: its own jobs,
       lowest priority first, then newest;
    2. each cohort that borrows more slots than its members can lend: the newest job of the member
       that borrows most (relative to its weight), until the cohort balances;
    3. a cluster holding more slots or floors than it has (a node left): lowest priority first,
       then newest, across all tenants.
    """
    ledger = Ledger(snapshot.cluster, snapshot.tenants)
    for job in snapshot.running:
        ledger.add(job)
    by_tenant: dict[str, list[RunningJob]] = {}
    for job in snapshot.running:
        by_tenant.setdefault(job.tenant, []).append(job)
    out: list[Preemption] = []

    def take(job: RunningJob, why: str) -> None:
        ledger.remove(job)
        by_tenant[job.tenant].remove(job)
        out.append(
            Preemption(
                job_id=job.id,
                tenant=job.tenant,
                by_job_id=None,
                reclaim=False,
                reason=f"preempted: {why}",
            )
        )

    for name in sorted(by_tenant):
        account = ledger.account(name)
        for job in sorted(by_tenant[name], key=victim_order):
            if not account.above_limits():
                break
            take(job, f"tenant {name} is above its lowered quota")
    for cohort, pool in sorted(ledger.pools.items()):
        while pool.borrowed > pool.lendable + EPSILON:
            members = [a for a in ledger.accounts.values() if a.cohort == cohort and a.borrowing()]
            if not members:
                break
            heaviest = max(members, key=lambda a: (share(a, ledger), a.name))
            take(
                newest_first(by_tenant[heaviest.name])[0],
                f"cohort {cohort} lends less than tenant {heaviest.name} borrows",
            )
    for job in sorted((j for jobs in by_tenant.values() for j in jobs), key=victim_order):
        if all(ledger.used[r] <= ledger.capacity[r] + EPSILON for r in RESOURCES):
            break
        take(job, "the cluster has fewer slots or less fabric bandwidth than its jobs hold")
    return tuple(out)
