"""Quota accounting: who holds how many slots and how much reserved floor bandwidth.

Admission reserves two resources per job: its slots and its bandwidth floor (a floor is only
guaranteed if it is reserved). For each resource a tenant has a nominal quota; a tenant in a
cohort may use more than nominal by borrowing its peers' idle nominal quota:

    borrowed(T) = max(0, used(T) - nominal(T))                 <= borrowing_limit(T)
    lendable(T) = min(lending_limit(T), max(0, nominal(T) - used(T)))
    sum of borrowed(T) over the cohort <= sum of lendable(T) over the cohort

and the cluster as a whole never holds more slots than it has nor more floors than its fabric.
The :class:`Ledger` keeps the cohort sums up to date so that a fit check is O(1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .types import Cluster, JobRequest, TenantQuota, WaitCode

SLOTS = 0
BANDWIDTH = 1
RESOURCES = (SLOTS, BANDWIDTH)

# Floors are floats in bit/s; a microbit per second of rounding is not a reason to wait.
EPSILON = 1e-6


class Dim:
    """One resource of one tenant: nominal, limits and current use."""

    __slots__ = ("borrow_limit", "lend_limit", "nominal", "used")

    def __init__(self, nominal: float, borrow_limit: float, lend_limit: float) -> None:
        self.nominal = nominal
        self.borrow_limit = borrow_limit
        self.lend_limit = lend_limit
        self.used = 0.0

    def borrowed_at(self, used: float) -> float:
        return max(0.0, used - self.nominal)

    def lendable_at(self, used: float) -> float:
        return min(self.lend_limit, max(0.0, self.nominal - used))


class Pool:
    """A cohort's running sums for one resource."""

    __slots__ = ("borrowed", "capacity", "lendable")

    def __init__(self) -> None:
        self.borrowed = 0.0  # sum of borrowed(T)
        self.lendable = 0.0  # sum of lendable(T) at current use
        self.capacity = 0.0  # sum of lendable(T) at zero use: the most the cohort can lend


class Account:
    """A tenant's quota and use."""

    __slots__ = ("cohort", "dims", "jobs", "pools", "quota")

    def __init__(self, quota: TenantQuota, pools: tuple[Pool, Pool] | None) -> None:
        self.quota = quota
        self.cohort = quota.cohort if pools is not None else None
        self.pools = pools
        in_cohort = pools is not None
        self.dims = (
            Dim(
                float(quota.nominal_slots),
                _limit(quota.borrowing_limit_slots, in_cohort),
                _limit(quota.lending_limit_slots, in_cohort),
            ),
            Dim(
                quota.nominal_bandwidth_bps,
                _limit(quota.borrowing_limit_bps, in_cohort),
                _limit(quota.lending_limit_bps, in_cohort),
            ),
        )
        self.jobs = 0

    @property
    def name(self) -> str:
        return self.quota.name

    def borrowing(self) -> bool:
        """Return True when the tenant uses more than nominal of any resource."""
        return any(dim.used > dim.nominal + EPSILON for dim in self.dims)

    def above_limits(self) -> bool:
        """Return True when the tenant holds more than it may ever hold: nominal plus its
        borrowing limit (nominal alone outside a cohort), or more jobs than its maximum."""
        limit = self.quota.max_running_jobs
        if limit is not None and self.jobs > limit:
            return True
        return any(d.used > d.nominal + d.borrow_limit + EPSILON for d in self.dims)

    def within_nominal_with(self, job: JobRequest) -> bool:
        """Return True when adding ``job`` keeps the tenant at or below nominal everywhere."""
        need = demand(job)
        return all(d.used + need[r] <= d.nominal + EPSILON for r, d in enumerate(self.dims))


def _limit(value: float | None, in_cohort: bool) -> float:
    if not in_cohort:
        return 0.0
    return math.inf if value is None else float(value)


def demand(job: JobRequest) -> tuple[float, float]:
    """Return what a job reserves: (slots, floor bit/s)."""
    return (float(job.slots), job.bandwidth_floor_bps)


class Ledger:
    """Tenants' use of slots and floors, with O(1) fit checks, adds and removes."""

    def __init__(self, cluster: Cluster, tenants: Iterable[TenantQuota]) -> None:
        self.cluster = cluster
        self.capacity = (float(cluster.slots), cluster.fabric_bps)
        self.used = [0.0, 0.0]
        self.pools: dict[str, tuple[Pool, Pool]] = {}
        self.accounts: dict[str, Account] = {}
        for quota in tenants:
            self.add_tenant(quota)

    def add_tenant(self, quota: TenantQuota) -> Account:
        pools = None
        if quota.cohort is not None:
            pools = self.pools.setdefault(quota.cohort, (Pool(), Pool()))
        account = Account(quota, pools)
        self.accounts[quota.name] = account
        if pools is not None:
            for r, dim in enumerate(account.dims):
                pools[r].lendable += dim.lendable_at(0.0)
                pools[r].capacity += dim.lendable_at(0.0)
        return account

    def account(self, tenant: str) -> Account:
        """Return the tenant's account; an unknown tenant gets one with zero quota."""
        found = self.accounts.get(tenant)
        if found is None:
            found = self.add_tenant(
                TenantQuota(name=tenant, nominal_slots=0, nominal_bandwidth_bps=0)
            )
        return found

    # --- changes -------------------------------------------------------------------------------

    def add(self, job: JobRequest) -> None:
        self._change(self.account(job.tenant), demand(job), +1)

    def remove(self, job: JobRequest) -> None:
        self._change(self.account(job.tenant), demand(job), -1)

    def _change(self, account: Account, need: tuple[float, float], sign: int) -> None:
        account.jobs += sign
        for r, dim in enumerate(account.dims):
            new = dim.used + sign * need[r]
            if account.pools is not None:
                pool = account.pools[r]
                pool.borrowed += dim.borrowed_at(new) - dim.borrowed_at(dim.used)
                pool.lendable += dim.lendable_at(new) - dim.lendable_at(dim.used)
            dim.used = new
            self.used[r] += sign * need[r]

    # --- checks --------------------------------------------------------------------------------

    def check(self, job: JobRequest) -> WaitCode | None:
        """Return None if ``job`` fits now, else the first reason it does not.

        Checked in the order a person would look: could it ever fit, the tenant's job count,
        then slots (tenant, cohort, cluster), then the bandwidth floor (same three).
        """
        account = self.account(job.tenant)
        need = demand(job)
        if self.too_large(account, need):
            return WaitCode.TOO_LARGE
        limit = account.quota.max_running_jobs
        if limit is not None and account.jobs + 1 > limit:
            return WaitCode.TENANT_JOBS
        codes = (
            (WaitCode.TENANT_SLOTS, WaitCode.COHORT_SLOTS, WaitCode.CLUSTER_SLOTS),
            (WaitCode.TENANT_BANDWIDTH, WaitCode.COHORT_BANDWIDTH, WaitCode.CLUSTER_BANDWIDTH),
        )
        for r in RESOURCES:
            if need[r] <= 0:
                continue
            code = self._check_dim(account, r, need[r])
            if code is not None:
                return codes[r][code]
            if self.used[r] + need[r] > self.capacity[r] + EPSILON:
                return codes[r][2]
        return None

    def _check_dim(self, account: Account, r: int, need: float) -> int | None:
        """Return None if the tenant may hold ``need`` more of resource ``r``; 0 when over its
        quota with no cohort to borrow from, 1 when the cohort cannot lend enough."""
        dim = account.dims[r]
        new = dim.used + need
        if account.pools is None:
            return None if new <= dim.nominal + EPSILON else 0
        pool = account.pools[r]
        borrowed = dim.borrowed_at(new)
        if borrowed > dim.borrow_limit + EPSILON:
            return 1
        borrowed_sum = pool.borrowed - dim.borrowed_at(dim.used) + borrowed
        lendable_sum = pool.lendable - dim.lendable_at(dim.used) + dim.lendable_at(new)
        return None if borrowed_sum <= lendable_sum + EPSILON else 1

    def too_large(self, account: Account, need: tuple[float, float]) -> bool:
        """Return True when the job could not fit even if nothing else were running."""
        for r, dim in enumerate(account.dims):
            if need[r] > self.capacity[r] + EPSILON:
                return True
            ceiling = dim.nominal
            if account.pools is not None:
                peers = account.pools[r].capacity - dim.lendable_at(0.0)
                ceiling += min(dim.borrow_limit, peers)
            if need[r] > ceiling + EPSILON:
                return True
        return False
