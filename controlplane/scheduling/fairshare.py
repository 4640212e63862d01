"""Weighted dominant-resource fair share: which tenant's queue is served next.

A tenant's share is a pair, compared in order, lowest first:

1. its *borrowing share*, as Kueue computes it: the slots it uses above nominal over the slots
   its cohort can lend, divided by its weight (floors are never borrowed, see :mod:`.quota`). Tenants within
   their quota all have 0 and go before any borrower; among borrowers the one that borrows least
   (relative to its weight) goes first.
2. its *dominant share* of the cluster (DRF): the larger of its slots over cluster slots and its
   floors over fabric bandwidth, divided by its weight. This orders tenants within quota when the
   cluster itself is the contended resource (nominal quotas sum to more than the cluster).
"""

from __future__ import annotations

from .quota import RESOURCES, SLOTS, Account, Ledger


def share(account: Account, ledger: Ledger) -> tuple[float, float]:
    """Return (borrowing share, dominant share), both already divided by the tenant's weight."""
    weight = account.quota.weight
    borrowing = 0.0
    slots = account.dims[SLOTS]
    if slots.pool is not None and slots.pool.capacity > 0:
        borrowing = slots.borrowed_at(slots.used) / slots.pool.capacity
    dominant = 0.0
    for r in RESOURCES:
        if ledger.capacity[r] > 0:
            dominant = max(dominant, account.dims[r].used / ledger.capacity[r])
    return (borrowing / weight, dominant / weight)
