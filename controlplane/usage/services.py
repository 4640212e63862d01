"""Tenant usage and quota changes: they read the tenant's jobs and may preempt them.

They span tenancy and jobs, so they live here, above both (tenancy imports no jobs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import Count, Sum

from controlplane import scheduling as core
from controlplane.jobs import adapters
from controlplane.jobs.choices import ACTIVE, WAITING
from controlplane.jobs.models import Job
from controlplane.jobs.scheduler import request_preemption
from controlplane.jobs.services import request_schedule
from controlplane.tenancy.access import AnyUser
from controlplane.tenancy.models import Tenant
from controlplane.tenancy.quotas import ON_OVERUSE, QuotaError, validated_changes


def tenant_usage(tenant: Tenant) -> core.TenantUsage:
    """What the tenant's jobs hold now, against its nominal quota (the core's type, in bit/s)."""
    jobs = Job.objects.filter(tenant=tenant)
    held = jobs.filter(status__in=ACTIVE).aggregate(
        slots=Sum("world_size"),
        mbps=Sum("allocation_mbps"),
        floors=Sum("bandwidth_floor_mbps"),
        n=Count("pk"),
    )
    slots, bps = held["slots"] or 0, float(held["mbps"] or 0.0) * adapters.MBPS
    nominal_bps = tenant.bandwidth_quota_mbps * adapters.MBPS
    return core.TenantUsage(
        tenant=tenant.slug,
        slots_used=slots,
        slots_nominal=tenant.slot_quota,
        slots_borrowed=max(0, slots - tenant.slot_quota),
        floor_bps_reserved=float(held["floors"] or 0) * adapters.MBPS,
        bandwidth_bps=bps,
        bandwidth_nominal_bps=nominal_bps,
        bandwidth_borrowed_bps=max(0.0, bps - nominal_bps),
        running_jobs=held["n"],
        waiting_jobs=jobs.filter(status__in=WAITING).count(),
    )


def usage_in_mbps(usage: core.TenantUsage) -> dict[str, Any]:
    """The usage API's view of ``usage``: bandwidth in Mbit/s, under the API's field names."""
    return {
        "tenant": usage.tenant,
        "slots_used": usage.slots_used,
        "slots_nominal": usage.slots_nominal,
        "slots_borrowed": usage.slots_borrowed,
        "bandwidth_used_mbps": usage.bandwidth_bps / adapters.MBPS,
        "bandwidth_nominal_mbps": usage.bandwidth_nominal_bps / adapters.MBPS,
        "bandwidth_borrowed_mbps": usage.bandwidth_borrowed_bps / adapters.MBPS,
        "floors_reserved_mbps": usage.floor_bps_reserved / adapters.MBPS,
        "running_jobs": usage.running_jobs,
        "queued_jobs": usage.waiting_jobs,
    }


def tenant_set_quota(
    *,
    tenant: Tenant,
    actor: AnyUser | None,
    changes: Mapping[str, Any],
    on_overuse: str | None = None,
) -> Tenant:
    """Apply a site admin's quota change and return the tenant refreshed.

    Raises QuotaError (nothing written) for unknown or invalid fields, and when the new
    quota is below current use and ``on_overuse`` is not "preempt" (stop the fewest,
    lowest-priority, newest jobs now) or "next_admission" (running jobs finish; nothing
    new is admitted above the quota).
    """
    values = validated_changes(changes)
    if on_overuse is not None and (not isinstance(on_overuse, str) or on_overuse not in ON_OVERUSE):
        raise QuotaError({"on_overuse": [f"must be one of {', '.join(ON_OVERUSE)}"]})
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        for name, value in values.items():
            setattr(tenant, name, value)
        usage = tenant_usage(tenant)
        over = _overuse(tenant, usage)
        if over and on_overuse is None:
            raise QuotaError({"on_overuse": [f"{over}: choose preempt or next_admission"]})
        tenant.save(update_fields=list(values) or None)
        if over and on_overuse == "preempt":
            _preempt_over_quota(tenant)
        request_schedule()
    return tenant


def _overuse(tenant: Tenant, usage: core.TenantUsage) -> str:
    """Describe how current use exceeds the (new) quota, or "" if it does not."""
    if usage.slots_used > _slot_limit(tenant):
        return f"tenant {tenant.slug} holds {usage.slots_used} slots, above the new quota of {tenant.slot_quota}"
    if usage.running_jobs > tenant.max_running_jobs:
        return f"tenant {tenant.slug} runs {usage.running_jobs} jobs, above the new limit of {tenant.max_running_jobs}"
    return ""


def _slot_limit(tenant: Tenant) -> float:
    """Most slots the tenant may hold: nominal, plus what it may borrow in its cohort."""
    if not tenant.cohort:
        return tenant.slot_quota
    if tenant.slot_borrowing_limit is None:
        return math.inf  # bounded only by what peers lend; the core's cohort check decides
    return tenant.slot_quota + tenant.slot_borrowing_limit


def _preempt_over_quota(tenant: Tenant) -> None:
    for preemption in core.over_quota(adapters.snapshot()):
        request_preemption(int(preemption.job_id), reason=preemption.reason)
