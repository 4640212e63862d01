"""Channel-layer group names: one per job, one per tenant, one for the cluster."""

from __future__ import annotations

CLUSTER_GROUP = "cluster"


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def user_group(user_id: int) -> str:
    """A user's own group: told when the user's memberships change (access re-check)."""
    return f"user.{user_id}"
