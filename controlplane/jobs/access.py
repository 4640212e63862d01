"""Access helpers for jobs: scoped by the caller's memberships; others' jobs are 404."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404

from controlplane.jobs.models import Job
from controlplane.tenancy.access import AnyUser, acting_tenants_for, tenants_for
from controlplane.tenancy.models import Role


def jobs_for(user: AnyUser) -> QuerySet[Job]:
    """Jobs of every tenant the user belongs to."""
    return Job.objects.filter(tenant__in=tenants_for(user)).select_related("tenant")


def get_job_for(user: AnyUser, job_id: int) -> Job:
    """Return the job if the user may see it; else raise Http404."""
    try:
        return jobs_for(user).get(pk=job_id)
    except Job.DoesNotExist:
        raise Http404("No such job") from None


def get_actable_job_for(user: AnyUser, job_id: int) -> Job:
    """Return the job if the user may act on it (member or tenant admin); else Http404.

    A viewer who can see the job but not act gets a 404 for the action as well:
    the action does not exist for them.
    """
    try:
        return Job.objects.filter(tenant__in=acting_tenants_for(user)).get(pk=job_id)
    except Job.DoesNotExist:
        raise Http404("No such job") from None


def get_tenant_admin_job_for(user: AnyUser, job_id: int) -> Job:
    """Return the job if the user is a tenant admin of its tenant (or a site admin); else 404."""
    if not isinstance(user, User):
        jobs = Job.objects.none()
    elif user.is_superuser:
        jobs = Job.objects.all()
    else:
        jobs = Job.objects.filter(
            tenant__memberships__user=user, tenant__memberships__role=Role.TENANT_ADMIN
        )
    try:
        return jobs.get(pk=job_id)
    except Job.DoesNotExist:
        raise Http404("No such job") from None
