"""Writes and scoped reads of telemetry rows that pages need (alarms, links, samples)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from controlplane.lib.publish import publish_on_commit
from controlplane.telemetry.groups import job_group, tenant_group
from controlplane.telemetry.models import Alarm
from controlplane.tenancy.access import AnyUser, acting_tenants_for, recorded_actor, tenants_for


def alarms_for(user: AnyUser) -> QuerySet[Alarm]:
    """Alarms of every job of every tenant the user belongs to, newest first."""
    return Alarm.objects.filter(job__tenant__in=tenants_for(user)).select_related(
        "job", "job__tenant", "acknowledged_by"
    )


def filtered_alarms(alarms: QuerySet[Alarm], wanted: dict[str, Any]) -> QuerySet[Alarm]:
    """Narrow alarms by ``state`` (open/cleared), ``kind``, ``tenant`` slug, ``job`` id and
    ``unacknowledged``; a missing or empty filter narrows nothing (the page and the API)."""
    if wanted.get("state") == "open":
        alarms = alarms.filter(cleared_at__isnull=True)
    elif wanted.get("state") == "cleared":
        alarms = alarms.filter(cleared_at__isnull=False)
    if wanted.get("kind"):
        alarms = alarms.filter(kind=wanted["kind"])
    if wanted.get("tenant"):
        alarms = alarms.filter(job__tenant__slug=wanted["tenant"])
    if wanted.get("job"):
        alarms = alarms.filter(job_id=wanted["job"])
    if wanted.get("unacknowledged"):
        alarms = alarms.filter(acknowledged=False)
    return alarms


def get_actable_alarm_for(user: AnyUser, alarm_id: int) -> Alarm:
    """Return the alarm if the user may act on its tenant (member, tenant admin); else Http404."""
    try:
        return Alarm.objects.select_related("job").get(
            pk=alarm_id, job__tenant__in=acting_tenants_for(user)
        )
    except Alarm.DoesNotExist:
        raise Http404("No such alarm") from None


def alarm_acknowledge(*, alarm: Alarm, actor: AnyUser) -> Alarm:
    """Mark the alarm acknowledged by ``actor`` (idempotent); return it.

    Only the first acknowledgement is recorded (a conditional update that must touch
    one row); the pages of the job and the tenant hear about it after commit.
    """
    now = timezone.now()
    updated = Alarm.objects.filter(pk=alarm.pk, acknowledged=False).update(
        acknowledged=True, acknowledged_at=now, acknowledged_by=recorded_actor(actor)
    )
    alarm.refresh_from_db()
    if updated:
        message = alarm_ack_message(alarm)
        publish_on_commit(job_group(alarm.job_id), message)
        publish_on_commit(tenant_group(alarm.job.tenant_id), message)
    return alarm


def alarm_ack_message(alarm: Alarm) -> dict[str, Any]:
    """The websocket ``alarm_ack`` message."""
    return {
        "type": "alarm_ack",
        "job": alarm.job_id,
        "data": {
            "alarm_id": alarm.pk,
            "by": getattr(alarm.acknowledged_by, "username", None),
            "at": alarm.acknowledged_at.isoformat() if alarm.acknowledged_at else None,
        },
    }
