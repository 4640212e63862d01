"""python manage.py seed_demo — the demo tenants, users and queues (idempotent).

Tenants ``vision`` and ``speech``; users ``admin`` (site admin), ``alice``
(tenant admin of vision), ``bob`` (member of speech). Password from
SYNCLANE_DEMO_PASSWORD (default ``synclane-demo``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from controlplane.jobs.models import Queue
from controlplane.tenancy.models import Membership, Role, Tenant

TENANTS = {
    "vision": {"name": "Vision", "slot_quota": 4, "bandwidth_quota_mbps": 1000},
    "speech": {"name": "Speech", "slot_quota": 4, "bandwidth_quota_mbps": 1000},
}
USERS = [
    # username, superuser, tenant, role
    ("admin", True, None, None),
    ("alice", False, "vision", Role.TENANT_ADMIN),
    ("bob", False, "speech", Role.MEMBER),
]


class Command(BaseCommand):
    help = "Create the demo tenants and users (safe to run again)."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        password = settings.SYNCLANE_DEMO_PASSWORD
        tenants = {}
        for slug, fields in TENANTS.items():
            tenants[slug], _ = Tenant.objects.get_or_create(slug=slug, defaults=fields)
            Queue.objects.get_or_create(tenant=tenants[slug], name="default")
        User = get_user_model()
        for username, superuser, tenant, role in USERS:
            user, created = User.objects.get_or_create(
                username=username,
                defaults={
                    "is_superuser": superuser,
                    "is_staff": superuser,
                    "email": f"{username}@example.com",
                },
            )
            if created:
                user.set_password(password)
                user.save()
            if tenant and role:
                Membership.objects.update_or_create(
                    user=user, tenant=tenants[tenant], defaults={"role": role}
                )
        self.stdout.write("demo ready: " + ", ".join(u for u, *_ in USERS))
