"""Writes and reports about tenants: quota changes (site admins) and usage."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, Sum

from controlplane import scheduling as core
from controlplane.tenancy.models import Tenant

# Quota fields a site admin may change: name -> (kind, minimum, nullable).
QUOTA_FIELDS: dict[str, tuple[type, float, bool]] = {
    "slot_quota": (int, 0, False),
    "bandwidth_quota_mbps": (int, 0, False),
    "max_running_jobs": (int, 0, False),
    "fair_share_weight": (float, 0.01, False),
    "cohort": (str, 0, False),
    "slot_borrowing_limit": (int, 0, True),
    "slot_lending_limit": (int, 0, True),
    "bandwidth_borrowing_limit_mbps": (int, 0, True),
    "bandwidth_lending_limit_mbps": (int, 0, True),
}
# What to do when a new quota is below what the tenant uses now.
ON_OVERUSE = ("preempt", "next_admission")


class QuotaError(ValueError):
    """Invalid quota change; ``errors`` maps each bad field to its reasons."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's nominal / borrowed / used slots and bandwidth now."""

    tenant: str
    slots_used: int
    slots_nominal: int
    slots_borrowed: int
    bandwidth_used_mbps: float
    bandwidth_nominal_mbps: float
    bandwidth_borrowed_mbps: float
    floors_reserved_mbps: float
    running_jobs: int
    queued_jobs: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tenant_usage(tenant: Tenant) -> TenantUsage:
    """What the tenant's jobs hold now, against its nominal quota."""
    from controlplane.jobs.choices import ACTIVE, JobStatus
    from controlplane.jobs.models import Job

    jobs = Job.objects.filter(tenant=tenant)
    held = jobs.filter(status__in=ACTIVE).aggregate(
        slots=Sum("world_size"),
        mbps=Sum("allocation_mbps"),
        floors=Sum("bandwidth_floor_mbps"),
        n=Count("pk"),
    )
    slots, mbps = held["slots"] or 0, float(held["mbps"] or 0.0)
    return TenantUsage(
        tenant=tenant.slug,
        slots_used=slots,
        slots_nominal=tenant.slot_quota,
        slots_borrowed=max(0, slots - tenant.slot_quota),
        bandwidth_used_mbps=mbps,
        bandwidth_nominal_mbps=float(tenant.bandwidth_quota_mbps),
        bandwidth_borrowed_mbps=max(0.0, mbps - tenant.bandwidth_quota_mbps),
        floors_reserved_mbps=float(held["floors"] or 0),
        running_jobs=held["n"],
        queued_jobs=jobs.filter(status=JobStatus.QUEUED).count(),
    )


def tenant_set_quota(
    *,
    tenant: Tenant,
    actor: AbstractBaseUser | None,
    changes: Mapping[str, Any],
    on_overuse: str | None = None,
) -> Tenant:
    """Apply a site admin's quota change and return the tenant refreshed.

    Raises QuotaError (nothing written) for unknown or invalid fields, and when the new
    quota is below current use and ``on_overuse`` is not "preempt" (stop the fewest,
    lowest-priority, newest jobs now) or "next_admission" (running jobs finish; nothing
    new is admitted above the quota).
    """
    values = _validated(changes)
    if on_overuse is not None and on_overuse not in ON_OVERUSE:
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
        _request_schedule()
    return tenant


def _validated(changes: Mapping[str, Any]) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    values: dict[str, Any] = {}
    for name, raw in changes.items():
        if name not in QUOTA_FIELDS:
            errors.setdefault(name, []).append("is not a quota field")
            continue
        kind, minimum, nullable = QUOTA_FIELDS[name]
        if raw is None or raw == "":
            if nullable or kind is str:
                values[name] = None if nullable else ""
            else:
                errors.setdefault(name, []).append("is required")
            continue
        if kind is str:
            values[name] = str(raw).strip()[:50]
            continue
        try:
            if isinstance(raw, bool) or (
                kind is int and isinstance(raw, float) and not raw.is_integer()
            ):
                raise ValueError
            value = kind(raw)
        except (TypeError, ValueError):
            errors.setdefault(name, []).append(
                f"must be a {'whole number' if kind is int else 'number'}"
            )
            continue
        if value < minimum:
            errors.setdefault(name, []).append(f"must be at least {minimum}")
            continue
        values[name] = value
    if errors:
        raise QuotaError(errors)
    return values


def _overuse(tenant: Tenant, usage: TenantUsage) -> str:
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
    from controlplane.jobs import adapters
    from controlplane.jobs.scheduler import request_preemption

    for preemption in core.over_quota(adapters.snapshot()):
        request_preemption(int(preemption.job_id), reason=preemption.reason)


def _request_schedule() -> None:
    from controlplane.jobs.services import request_schedule

    request_schedule()
