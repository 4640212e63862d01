"""REST API v1 for tenants: the list, one tenant, usage (members) and quota (site admins)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.lib.api_schema import errors
from controlplane.lib.parsers import body_object
from controlplane.tenancy.access import AnyUser, get_tenant_for, membership_of, tenants_for
from controlplane.tenancy.models import Tenant
from controlplane.tenancy.quotas import QUOTA_FIELDS, QuotaError
from controlplane.usage.services import tenant_set_quota, tenant_usage, usage_in_mbps


class UsageSerializer(serializers.Serializer[Any]):
    """What a tenant's jobs hold now against its nominal quota (``TenantUsage``)."""

    tenant = serializers.SlugField()
    slots_used = serializers.IntegerField()
    slots_nominal = serializers.IntegerField()
    slots_borrowed = serializers.IntegerField()
    bandwidth_used_mbps = serializers.FloatField()
    bandwidth_nominal_mbps = serializers.FloatField()
    bandwidth_borrowed_mbps = serializers.FloatField()
    floors_reserved_mbps = serializers.FloatField()
    running_jobs = serializers.IntegerField()
    queued_jobs = serializers.IntegerField()


class QuotaSerializer(serializers.Serializer[Any]):
    """A tenant's quota fields (PATCH takes any of them, plus ``on_overuse``)."""

    tenant = serializers.SlugField(read_only=True)
    slot_quota = serializers.IntegerField(min_value=0)
    bandwidth_quota_mbps = serializers.IntegerField(min_value=0)
    max_running_jobs = serializers.IntegerField(min_value=0)
    fair_share_weight = serializers.FloatField(min_value=0.01)
    cohort = serializers.CharField(max_length=50, allow_blank=True)
    slot_borrowing_limit = serializers.IntegerField(min_value=0, allow_null=True)
    slot_lending_limit = serializers.IntegerField(min_value=0, allow_null=True)
    bandwidth_borrowing_limit_mbps = serializers.IntegerField(min_value=0, allow_null=True)
    bandwidth_lending_limit_mbps = serializers.IntegerField(min_value=0, allow_null=True)
    on_overuse = serializers.ChoiceField(
        choices=["preempt", "next_admission"],
        write_only=True,
        required=False,
        help_text="needed when the new quota is below current use",
    )


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    role = serializers.SerializerMethodField(help_text="your role here (site_admin for admins)")

    class Meta:
        model = Tenant
        fields = [
            "slug",
            "name",
            "role",
            "cohort",
            "fair_share_weight",
            "slot_quota",
            "bandwidth_quota_mbps",
            "max_running_jobs",
        ]
        read_only_fields = fields

    def get_role(self, tenant: Tenant) -> str:
        return role_of(self.context["request"].user, tenant)


class TenantDetailSerializer(TenantSerializer):
    usage = serializers.SerializerMethodField()

    class Meta(TenantSerializer.Meta):
        fields = [*TenantSerializer.Meta.fields, "usage"]
        read_only_fields = fields

    @extend_schema_field(UsageSerializer)
    def get_usage(self, tenant: Tenant) -> dict[str, Any]:
        return usage_in_mbps(tenant_usage(tenant))


def role_of(user: AnyUser, tenant: Tenant) -> str:
    """The user's role in the tenant; ``site_admin`` for site admins."""
    if getattr(user, "is_superuser", False):
        return "site_admin"
    membership = membership_of(user, tenant)
    return membership.role if membership else ""


def quota_of(tenant: Tenant) -> dict[str, Any]:
    return {"tenant": tenant.slug, **{name: getattr(tenant, name) for name in QUOTA_FIELDS}}


TENANT_EXAMPLE = {
    "slug": "vision",
    "name": "Vision",
    "role": "tenant_admin",
    "cohort": "research",
    "fair_share_weight": 1.0,
    "slot_quota": 4,
    "bandwidth_quota_mbps": 1000,
    "max_running_jobs": 4,
}
USAGE_EXAMPLE = {
    "tenant": "vision",
    "slots_used": 2,
    "slots_nominal": 4,
    "slots_borrowed": 0,
    "bandwidth_used_mbps": 500.0,
    "bandwidth_nominal_mbps": 1000.0,
    "bandwidth_borrowed_mbps": 0.0,
    "floors_reserved_mbps": 0.0,
    "running_jobs": 1,
    "queued_jobs": 0,
}
QUOTA_EXAMPLE = {
    "tenant": "vision",
    "slot_quota": 4,
    "bandwidth_quota_mbps": 1000,
    "max_running_jobs": 4,
    "fair_share_weight": 1.0,
    "cohort": "research",
    "slot_borrowing_limit": None,
    "slot_lending_limit": None,
    "bandwidth_borrowing_limit_mbps": None,
    "bandwidth_lending_limit_mbps": None,
}


class TenantList(APIView):
    """The tenants you belong to (every tenant for a site admin)."""

    @extend_schema(
        operation_id="tenants_list",
        responses={200: TenantSerializer(many=True), **errors()},
        examples=[OpenApiExample("Your tenants", value=[TENANT_EXAMPLE], response_only=True)],
    )
    def get(self, request: Request) -> Response:
        tenants = tenants_for(request.user)
        return Response(TenantSerializer(tenants, many=True, context={"request": request}).data)


class TenantDetail(APIView):
    @extend_schema(
        operation_id="tenants_get",
        responses={200: TenantDetailSerializer, **errors(404)},
        examples=[
            OpenApiExample(
                "A tenant with its usage",
                value={**TENANT_EXAMPLE, "usage": USAGE_EXAMPLE},
                response_only=True,
            )
        ],
    )
    def get(self, request: Request, slug: str) -> Response:
        tenant = get_tenant_for(request.user, slug)
        return Response(TenantDetailSerializer(tenant, context={"request": request}).data)


class TenantUsageView(APIView):
    @extend_schema(
        operation_id="tenants_usage",
        responses={200: UsageSerializer, **errors(404)},
        examples=[OpenApiExample("Half the slots in use", value=USAGE_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(usage_in_mbps(tenant_usage(get_tenant_for(request.user, slug))))


class TenantQuotaView(APIView):
    """GET/PATCH a tenant's quota. Site admins only; others get 404 (not 403)."""

    def _tenant(self, request: Request, slug: str) -> Tenant:
        if not request.user.is_superuser:
            raise Http404("No such tenant")
        return get_tenant_for(request.user, slug)

    @extend_schema(
        operation_id="tenants_quota_get",
        responses={200: QuotaSerializer, **errors(404)},
        examples=[OpenApiExample("A quota", value=QUOTA_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(quota_of(self._tenant(request, slug)))

    @extend_schema(
        operation_id="tenants_quota_set",
        request=QuotaSerializer(partial=True),
        responses={200: QuotaSerializer, **errors(400, 404)},
        examples=[
            OpenApiExample(
                "Shrink below use, preempting",
                value={"slot_quota": 2, "on_overuse": "preempt"},
                request_only=True,
            ),
            OpenApiExample("The new quota", value=QUOTA_EXAMPLE, response_only=True),
        ],
    )
    def patch(self, request: Request, slug: str) -> Response:
        tenant = self._tenant(request, slug)
        data = dict(body_object(request.data))
        on_overuse = data.pop("on_overuse", None)
        try:
            tenant = tenant_set_quota(
                tenant=tenant, actor=request.user, changes=data, on_overuse=on_overuse
            )
        except QuotaError as exc:
            raise ValidationError(exc.errors) from None
        return Response(quota_of(tenant))
