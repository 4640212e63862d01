from django.contrib import admin

from controlplane.tenancy.models import Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "slot_quota",
        "bandwidth_quota_mbps",
        "max_running_jobs",
        "fair_share_weight",
        "cohort",
    ]
    list_editable = ["slot_quota", "bandwidth_quota_mbps", "max_running_jobs"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role"]
    list_filter = ["tenant", "role"]
