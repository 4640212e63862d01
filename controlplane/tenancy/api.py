"""REST API v1 for tenants: usage (members) and quota (site admins)."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.tenancy.access import get_tenant_for
from controlplane.tenancy.models import Tenant
from controlplane.tenancy.services import (
    QUOTA_FIELDS,
    QuotaError,
    tenant_set_quota,
    tenant_usage,
)


def quota_of(tenant: Tenant) -> dict[str, Any]:
    return {"tenant": tenant.slug, **{name: getattr(tenant, name) for name in QUOTA_FIELDS}}


class TenantUsageView(APIView):
    def get(self, request: Request, slug: str) -> Response:
        return Response(tenant_usage(get_tenant_for(request.user, slug)).as_dict())


class TenantQuotaView(APIView):
    """GET/PATCH a tenant's quota. Site admins only; others get 404 (not 403)."""

    def _tenant(self, request: Request, slug: str) -> Tenant:
        from django.http import Http404

        if not request.user.is_superuser:
            raise Http404("No such tenant")
        return get_tenant_for(request.user, slug)

    def get(self, request: Request, slug: str) -> Response:
        return Response(quota_of(self._tenant(request, slug)))

    def patch(self, request: Request, slug: str) -> Response:
        tenant = self._tenant(request, slug)
        data = dict(request.data) if hasattr(request.data, "items") else {}
        on_overuse = data.pop("on_overuse", None)
        try:
            tenant = tenant_set_quota(
                tenant=tenant, actor=request.user, changes=data, on_overuse=on_overuse
            )
        except QuotaError as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        return Response(quota_of(tenant))
