"""Access helpers for bundles: scoped by the caller's memberships; others' are 404."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.http import Http404

from controlplane.bundles.models import CodeBundle
from controlplane.tenancy.access import AnyUser, acting_tenants_for, tenants_for
from controlplane.tenancy.models import Tenant


def bundles_for(user: AnyUser) -> QuerySet[CodeBundle]:
    """Bundles of every tenant the user belongs to."""
    return CodeBundle.objects.filter(tenant__in=tenants_for(user)).select_related("tenant")


def get_bundle_for(user: AnyUser, bundle_id: int) -> CodeBundle:
    """Return the bundle if the user may see it; else raise Http404."""
    try:
        return bundles_for(user).get(pk=bundle_id)
    except CodeBundle.DoesNotExist:
        raise Http404("No such bundle") from None


def get_actable_bundle_for(user: AnyUser, bundle_id: int) -> CodeBundle:
    """Return the bundle if the user may delete it (member or tenant admin); else Http404."""
    try:
        return CodeBundle.objects.filter(tenant__in=acting_tenants_for(user)).get(pk=bundle_id)
    except CodeBundle.DoesNotExist:
        raise Http404("No such bundle") from None


def find_tenant_bundle(tenant: Tenant, ref: str | int) -> CodeBundle | None:
    """The tenant's bundle named by id or sha256 (or a unique hash prefix of 8+), or None.

    Only ``tenant``'s bundles are searched: another tenant's bundle is "not found".
    """
    ref = str(ref).strip().lower()
    bundles = CodeBundle.objects.filter(tenant=tenant)
    if ref.isdigit() and len(ref) < 20:
        match = Q(pk=int(ref))
        if len(ref) >= 8:
            match |= Q(sha256__startswith=ref)
        found = list(bundles.filter(match)[:2])
    elif len(ref) >= 8 and all(c in "0123456789abcdef" for c in ref):
        found = list(bundles.filter(sha256__startswith=ref)[:2])
    else:
        return None
    return found[0] if len(found) == 1 else None
