"""Tenants (teams), their quotas, and who belongs to them."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models


class Tenant(models.Model):
    """A team. Its quotas bound what its jobs may hold at once."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    # Quotas. Slots are rank seats; bandwidth is Mbit/s summed over the tenant's running jobs.
    slot_quota = models.PositiveIntegerField(default=4)
    bandwidth_quota_mbps = models.PositiveIntegerField(default=1000)
    max_running_jobs = models.PositiveIntegerField(default=4)
    fair_share_weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)])
    # Optional cohort: tenants of one cohort lend idle quota to each other.
    cohort = models.CharField(max_length=50, blank=True, default="")
    # Limits: empty means "no limit" (borrow or lend whatever the cohort allows); a tenant
    # without a cohort neither borrows nor lends.
    slot_borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    slot_lending_limit = models.PositiveIntegerField(null=True, blank=True)
    bandwidth_borrowing_limit_mbps = models.PositiveIntegerField(null=True, blank=True)
    bandwidth_lending_limit_mbps = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    TENANT_ADMIN = "tenant_admin", "Tenant admin"


# Roles allowed to act (submit, cancel) and not only to look.
ACTING_ROLES = frozenset({Role.MEMBER, Role.TENANT_ADMIN})


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"

    def can_act(self) -> bool:
        return self.role in ACTING_ROLES
