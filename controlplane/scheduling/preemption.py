"""Choosing victims so that a job that does not fit can run.

Two rules, as in Kueue:

1. *Priority within a tenant*: a job may preempt running jobs of its own tenant with a strictly
   lower priority.
2. *Reclaim within a cohort*: a job whose tenant stays at or below its nominal quota (slots and
   floors) after admission may preempt jobs of cohort peers that are borrowing (using more than
   their nominal), whatever their priority: lent quota is returned on demand.

Victims are taken lowest priority first, newest first, until the job fits; then every victim
that turns out not to be needed is kept running (trying the later picks first), which leaves the
fewest victims the order allows.

Why this cannot loop: rule 1 only goes down in priority, and rule 2 only takes from a tenant
above nominal on behalf of a tenant that ends at or below nominal, so the victim's tenant cannot
take it back by rule 2 (its preemptor would then be above nominal).
"""

from __future__ import annotations

from collections.abc import Iterable

from .quota import Account, Ledger
from .types import JobRequest, RunningJob


def victim_order(job: RunningJob) -> tuple[int, float, str]:
    """Sort key: lowest priority first, then newest first."""
    return (job.priority, -job.started_at, job.id)


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
        own = [
            r
            for r in self.by_tenant.get(job.tenant, ())
            if r.priority < job.priority and r.id not in self.gone
        ]
        account = self.ledger.account(job.tenant)
        peers: list[RunningJob] = []
        if account.cohort is not None and account.within_nominal_with(job):
            for member in self.cohort_members[account.cohort]:
                if member is account or not member.borrowing():
                    continue
                peers.extend(
                    r for r in self.by_tenant.get(member.name, ()) if r.id not in self.gone
                )
        if not peers:
            return own
        candidates = own + peers
        candidates.sort(key=victim_order)
        return candidates

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
        needed.sort(key=victim_order)
        return needed
