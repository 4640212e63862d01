"""Access helpers: every lookup of a tenant's object goes through here.

Another tenant's object is reported as missing (404), never as forbidden, so
its existence is not confirmed.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.http import Http404

from controlplane.tenancy.models import Membership, Tenant

AnyUser = User | AnonymousUser


def recorded_actor(user: AnyUser | None) -> User | None:
    """The user to record as a change's actor; None for nobody or an anonymous user."""
    return user if isinstance(user, User) else None


def tenants_for(user: AnyUser) -> QuerySet[Tenant]:
    """Return the tenants the user belongs to (all of them for a site admin)."""
    if not isinstance(user, User):
        return Tenant.objects.none()
    if user.is_superuser:
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user)


def acting_tenants_for(user: AnyUser) -> QuerySet[Tenant]:
    """Return the tenants in which the user may submit and cancel jobs."""
    if not isinstance(user, User):
        return Tenant.objects.none()
    if user.is_superuser:
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
    if not isinstance(user, User):
        return None
    return Membership.objects.filter(user=user, tenant=tenant).first()
