"""Access helpers: every lookup of a tenant's object goes through here.

Another tenant's object is reported as missing (404), never as forbidden, so
its existence is not confirmed.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404

from controlplane.tenancy.models import Membership, Tenant

AnyUser = AbstractBaseUser | AnonymousUser


def tenants_for(user: AnyUser) -> QuerySet[Tenant]:
    """Return the tenants the user belongs to (all of them for a site admin)."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    if getattr(user, "is_superuser", False):
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user)


def acting_tenants_for(user: AnyUser) -> QuerySet[Tenant]:
    """Return the tenants in which the user may submit and cancel jobs."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    if getattr(user, "is_superuser", False):
        return Tenant.objects.all()
    return Tenant.objects.filter(
        memberships__user=user, memberships__role__in=["member", "tenant_admin"]
    )


def get_tenant_for(user: AnyUser, slug: str) -> Tenant:
    """Return the tenant with this slug if the user belongs to it; else raise Http404."""
    try:
        return tenants_for(user).get(slug=slug)
    except Tenant.DoesNotExist:
        raise Http404("No such tenant") from None


def membership_of(user: AnyUser, tenant: Tenant) -> Membership | None:
    """Return the user's membership in the tenant, or None if there is none."""
    if not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, tenant=tenant).first()
