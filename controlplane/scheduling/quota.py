"""Quota accounting: who holds how many slots and how much reserved floor bandwidth.

Admission reserves two resources per job: its slots and its bandwidth floor (a floor is only
guaranteed if it is reserved). For slots, a tenant in a cohort may use more than its nominal
quota by borrowing its peers' idle nominal slots:

    borrowed(T) = max(0, used(T) - nominal(T))                 <= borrowing_limit(T)
    lendable(T) = min(lending_limit(T), max(0, nominal(T) - used(T)))
    sum of borrowed(T) over the cohort <= sum of lendable(T) over the cohort

Floors are reserved from the tenant's own nominal bandwidth only. A floor is a guarantee; had
it been borrowed from a peer, the peer could not reclaim its nominal bandwidth without breaking
that guarantee. Cohort borrowing of bandwidth happens above the floors, at allocation time
(:mod:`.bandwidth`), where it is returned on demand by construction.

The cluster as a whole never holds more slots than it has nor more floors than its fabric.
The :class:`Ledger` keeps the cohort sums up to date so that a fit check is O(1).

When the cluster is given with nodes, the ledger also keeps a :class:`~.placement.Topology`:
the cluster totals stay a quick first check, then a job must also be *placed* (all its ranks
at once, :mod:`.placement`), and floors count per node, only for jobs that span nodes (a job on
one node uses no fabric), so the pooled fabric check is off. The tenants' floors still count
every job: a tenant's bandwidth quota covers its local jobs' allocations too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .placement import Topology
from .types import Cluster, JobRequest, Placement, RunningJob, TenantQuota, WaitCode

SLOTS = 0
BANDWIDTH = 1
RESOURCES = (SLOTS, BANDWIDTH)

# Floors are floats in bit/s; a microbit per second of rounding is not a reason to wait.
EPSILON = 1e-6


class Pool:
    """A cohort's running sums for slots."""

    __slots__ = ("borrowed", "capacity", "lendable")

    def __init__(self) -> None:
        self.borrowed = 0.0  # sum of borrowed(T)
        self.lendable = 0.0  # sum of lendable(T) at current use
        self.capacity = 0.0  # sum of lendable(T) at zero use: the most the cohort can lend


class Dim:
    """One resource of one tenant: nominal, limits, current use, and the cohort pool it
    borrows from and lends to (None: it does neither)."""

    __slots__ = ("borrow_limit", "lend_limit", "nominal", "pool", "used")

    def __init__(
        self,
        nominal: float,
        pool: Pool | None,
        borrow_limit: float | None,
        lend_limit: float | None,
    ) -> None:
        self.nominal = nominal
        self.pool = pool
        in_pool = pool is not None
        self.borrow_limit = (math.inf if borrow_limit is None else borrow_limit) if in_pool else 0.0
        self.lend_limit = (math.inf if lend_limit is None else lend_limit) if in_pool else 0.0
        self.used = 0.0
        if pool is not None:
            pool.lendable += self.lendable_at(0.0)
            pool.capacity += self.lendable_at(0.0)

    def borrowed_at(self, used: float) -> float:
        return max(0.0, used - self.nominal)

    def lendable_at(self, used: float) -> float:
        return min(self.lend_limit, max(0.0, self.nominal - used))

    def change(self, delta: float) -> None:
        new = self.used + delta
        if self.pool is not None:
            self.pool.borrowed += self.borrowed_at(new) - self.borrowed_at(self.used)
            self.pool.lendable += self.lendable_at(new) - self.lendable_at(self.used)
        self.used = new

    def refusal(self, need: float) -> int | None:
        """Return None if the tenant may hold ``need`` more; 0 when that is over its quota and
        it cannot borrow, 1 when its borrowing limit or its cohort's idle quota is too small."""
        new = self.used + need
        pool = self.pool
        if pool is None:
            return None if new <= self.nominal + EPSILON else 0
        borrowed = self.borrowed_at(new)
        if borrowed > self.borrow_limit + EPSILON:
            return 1
        borrowed_sum = pool.borrowed - self.borrowed_at(self.used) + borrowed
        lendable_sum = pool.lendable - self.lendable_at(self.used) + self.lendable_at(new)
        return None if borrowed_sum <= lendable_sum + EPSILON else 1

    def most(self) -> float:
        """Return the most the tenant could ever hold: nominal plus what peers could lend."""
        if self.pool is None:
            return self.nominal
        peers = self.pool.capacity - self.lendable_at(0.0)
        return self.nominal + min(self.borrow_limit, peers)


class Account:
    """A tenant's quota and use."""

    __slots__ = ("cohort", "dims", "jobs", "quota")

    def __init__(self, quota: TenantQuota, pool: Pool | None) -> None:
        self.quota = quota
        self.cohort = quota.cohort if pool is not None else None
        self.dims = (
            Dim(
                float(quota.nominal_slots),
                pool,
                quota.borrowing_limit_slots,
                quota.lending_limit_slots,
            ),
            Dim(quota.nominal_bandwidth_bps, None, None, None),
        )
        self.jobs = 0

    @property
    def name(self) -> str:
        return self.quota.name

    @property
    def slot_pool(self) -> Pool | None:
        return self.dims[SLOTS].pool

    def borrowing(self) -> bool:
        """Return True when the tenant holds more slots than its nominal quota."""
        slots = self.dims[SLOTS]
        return slots.used > slots.nominal + EPSILON

    def within_nominal_with(self, job: JobRequest) -> bool:
        """Return True when adding ``job`` keeps the tenant at or below nominal everywhere."""
        need = demand(job)
        return all(d.used + need[r] <= d.nominal + EPSILON for r, d in enumerate(self.dims))

    def above_limits(self) -> bool:
        """Return True when the tenant holds more than it may ever hold: nominal plus its
        borrowing limit (nominal alone outside a cohort), or more jobs than its maximum."""
        limit = self.quota.max_running_jobs
        if limit is not None and self.jobs > limit:
            return True
        return any(d.used > d.nominal + d.borrow_limit + EPSILON for d in self.dims)


def demand(job: JobRequest) -> tuple[float, float]:
    """Return what a job reserves: (slots, floor bit/s)."""
    return (float(job.slots), job.bandwidth_floor_bps)


class Ledger:
    """Tenants' use of slots and floors, with O(1) fit checks, adds and removes."""

    def __init__(self, cluster: Cluster, tenants: Iterable[TenantQuota]) -> None:
        self.used = [0.0, 0.0]
        self.pools: dict[str, Pool] = {}  # slot pools by cohort name
        self.accounts: dict[str, Account] = {}
        self.topology: Topology | None = None
        # The last placement found by check(): (state version, job id, placement).
        self.version = 0
        self.placed: tuple[int, str, Placement] | None = None
        self.resize(cluster)
        for quota in tenants:
            self.add_tenant(quota)

    def resize(self, cluster: Cluster) -> None:
        """Take the cluster's new capacity and nodes (use is unchanged)."""
        self.cluster = cluster
        old = self.topology
        self.topology = Topology.of(cluster)
        fabric = cluster.fabric_bps if self.topology is None else math.inf
        self.capacity = (float(cluster.slots), fabric)
        if old is not None and self.topology is not None:
            for job_id, (placement, floor) in old.holding.items():
                self.topology.hold(job_id, placement, floor)
        self.version += 1

    def add_tenant(self, quota: TenantQuota) -> Account:
        pool = None if quota.cohort is None else self.pools.setdefault(quota.cohort, Pool())
        account = self.accounts[quota.name] = Account(quota, pool)
        return account

    def account(self, tenant: str) -> Account:
        """Return the tenant's account; an unknown tenant gets one with zero quota."""
        found = self.accounts.get(tenant)
        if found is None:
            zero = TenantQuota(name=tenant, nominal_slots=0, nominal_bandwidth_bps=0)
            found = self.add_tenant(zero)
        return found

    def add(self, job: JobRequest) -> None:
        """Count ``job``'s use; a running job's placement also counts on its nodes."""
        self._change(self.account(job.tenant), demand(job), +1)
        topology = self.topology
        if topology is not None and isinstance(job, RunningJob) and job.placement is not None:
            topology.hold(job.id, job.placement, job.bandwidth_floor_bps)

    def remove(self, job: JobRequest) -> None:
        self._change(self.account(job.tenant), demand(job), -1)
        if self.topology is not None:
            self.topology.release(job.id)

    def _change(self, account: Account, need: tuple[float, float], sign: int) -> None:
        self.version += 1
        account.jobs += sign
        for r, dim in enumerate(account.dims):
            dim.change(sign * need[r])
            self.used[r] += sign * need[r]

    def check(self, job: JobRequest) -> WaitCode | None:
        """Return None if ``job`` fits now, else the first reason it does not.

        Checked in the order a person would look: could it ever fit (and, on a cluster with
        nodes, is there a schedulable node with its labels), the tenant's job count,
        then slots (tenant, cohort, cluster), then the bandwidth floor (tenant, fabric), then,
        on a cluster with nodes, whether all its ranks can be placed at once (the placement
        found is kept for :meth:`placement`).
        """
        account = self.account(job.tenant)
        need = demand(job)
        if self.too_large(account, need):
            return WaitCode.TOO_LARGE
        topology = self.topology
        if topology is not None and not topology.eligible(job.selector_key):
            return WaitCode.NODE_SELECTOR  # no schedulable node carries its labels
        limit = account.quota.max_running_jobs
        if limit is not None and account.jobs + 1 > limit:
            return WaitCode.TENANT_JOBS
        codes = (
            (WaitCode.TENANT_SLOTS, WaitCode.COHORT_SLOTS, WaitCode.CLUSTER_SLOTS),
            (WaitCode.TENANT_BANDWIDTH, WaitCode.TENANT_BANDWIDTH, WaitCode.CLUSTER_BANDWIDTH),
        )
        for r in RESOURCES:
            if need[r] <= 0:
                continue
            refusal = account.dims[r].refusal(need[r])
            if refusal is not None:
                return codes[r][refusal]
            if self.used[r] + need[r] > self.capacity[r] + EPSILON:
                return codes[r][2]
        if self.topology is not None:
            found = self.topology.place_job(job)
            if not isinstance(found, Placement):
                return found
            self.placed = (self.version, job.id, found)
        elif job.node_selector:
            return WaitCode.NODE_SELECTOR  # a pooled cluster has no node to carry the labels
        return None

    def placement(self, job: JobRequest) -> Placement | None:
        """Where ``job`` goes now that :meth:`check` let it in (None on a pooled cluster)."""
        if self.topology is None:
            return None
        placed = self.placed
        if placed is not None and placed[0] == self.version and placed[1] == job.id:
            return placed[2]
        found = self.topology.place_job(job)
        if not isinstance(found, Placement):
            raise AssertionError(f"job {job.id} was checked in but cannot be placed: {found}")
        return found

    def too_large(self, account: Account, need: tuple[float, float]) -> bool:
        """Return True when the job could not fit even if nothing else were running."""
        return any(
            need[r] > min(self.capacity[r], dim.most()) + EPSILON
            for r, dim in enumerate(account.dims)
        )
