"""Choosing victims so that a job that does not fit can run.

Two rules, as in Kueue:

1. *Reclaim within a cohort*: a job whose tenant stays at or below its nominal quota (slots and
   floors) after admission may preempt jobs of cohort peers that are borrowing (holding more
   slots than their nominal), whatever their priority: lent quota is returned on demand. A peer's jobs are
   taken newest first, and only while the peer still borrows, because the newest jobs are the
   ones running on borrowed quota. These victims are tried before rule 2's.
2. *Priority within a tenant*: a job may preempt running jobs of its own tenant with a strictly
   lower priority, lowest priority first, then newest first.

Victims are taken in that order until the job fits; then every victim that turns out not to be
needed is kept running (trying the later picks first), which leaves the fewest victims the order
allows.

Why two jobs never preempt each other: rule 2 only goes down in priority. For rule 1, say A of
tenant X reclaimed B of tenant Y. X was at or below nominal right after A's admission, so the
jobs X admitted up to A fit in X's nominal; for B to take A back, X must be borrowing, and taking
X's jobs newest first brings X back to nominal before A's turn comes. This needs ``started_at``
to grow with admission order across decisions (jobs admitted in the same decision share it; ties
are broken by reversed queue order, which is the order they were admitted in).
"""

from __future__ import annotations

from collections.abc import Iterable

from .fairshare import share
from .quota import EPSILON, RESOURCES, Account, Ledger
from .types import JobRequest, Preemption, RunningJob, Snapshot


def victim_order(job: RunningJob) -> tuple[int, float, str]:
    """Sort key of rule 2: lowest priority first, then newest first."""
    return (job.priority, -job.started_at, job.id)


def newest_first(jobs: list[RunningJob]) -> list[RunningJob]:
    """Return ``jobs`` newest first: latest ``started_at``, then latest in queue order."""
    jobs = sorted(jobs, key=lambda j: j.id, reverse=True)
    return sorted(jobs, key=lambda j: (-j.started_at, j.priority, -j.submit_time))


class Preemptor:
    """Victim search over the running jobs of one snapshot.

    The ledger is shared with admission: a successful :meth:`find` leaves the victims removed
    from it, so the caller only has to add the preemptor.
    """

    def __init__(self, ledger: Ledger, running: Iterable[RunningJob]) -> None:
        self.ledger = ledger
        self.by_tenant: dict[str, list[RunningJob]] = {}
        for job in running:
            self.by_tenant.setdefault(job.tenant, []).append(job)
        for jobs in self.by_tenant.values():
            jobs.sort(key=victim_order)
        self.cohort_members: dict[str, list[Account]] = {}
        for account in ledger.accounts.values():
            if account.cohort is not None:
                self.cohort_members.setdefault(account.cohort, []).append(account)
        self.gone: set[str] = set()
        # Per tenant, (priority, slots, floor) of searches that failed: a later job of the same
        # tenant that is no higher and no smaller fails too (its candidates are a subset and it
        # needs more), so it is not searched again. Cleared when a search in the cohort succeeds.
        self.failed: dict[str, list[tuple[int, int, float]]] = {}

    def find(self, job: JobRequest) -> list[RunningJob] | None:
        """Return the victims that let ``job`` fit (removed from the ledger), or None."""
        if self._known_to_fail(job):
            return None
        candidates = self._candidates(job)
        victims = self._take_until_fit(job, candidates) if candidates else None
        if victims is None:
            self.failed.setdefault(job.tenant, []).append(
                (job.priority, job.slots, job.bandwidth_floor_bps)
            )
            return None
        self._forget_failures(job.tenant)
        self.gone.update(v.id for v in victims)
        return victims

    def _known_to_fail(self, job: JobRequest) -> bool:
        return any(
            job.priority <= p and job.slots >= s and job.bandwidth_floor_bps >= f
            for p, s, f in self.failed.get(job.tenant, ())
        )

    def _forget_failures(self, tenant: str) -> None:
        cohort = self.ledger.account(tenant).cohort
        if cohort is None:
            self.failed.pop(tenant, None)
            return
        for member in self.cohort_members.get(cohort, ()):
            self.failed.pop(member.name, None)

    def _candidates(self, job: JobRequest) -> list[RunningJob]:
        """Return reclaimable peer jobs (newest first), then own lower-priority jobs."""
        own = []
        for r in self.by_tenant.get(job.tenant, ()):
            if r.priority >= job.priority:
                break  # sorted by priority: no lower-priority job follows
            if r.id not in self.gone:
                own.append(r)
        account = self.ledger.account(job.tenant)
        if account.cohort is None or not account.within_nominal_with(job):
            return own
        peers: list[RunningJob] = []
        for member in self.cohort_members[account.cohort]:
            if member is not account and member.borrowing():
                peers.extend(
                    r for r in self.by_tenant.get(member.name, ()) if r.id not in self.gone
                )
        return newest_first(peers) + own

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
