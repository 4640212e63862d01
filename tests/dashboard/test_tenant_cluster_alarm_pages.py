"""Tenant overview, quota edit, cluster view and alarms page: content and access."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.telemetry.models import Alarm, MetricSample

from .conftest import client_for

pytestmark = pytest.mark.django_db


def test_the_tenant_overview_shows_queue_positions_and_use_against_quota(client, alice, vision):
    vision.slot_quota = 0
    vision.save()
    first = job_submit(
        tenant=vision,
        spec=JobSpec(name="first", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    job_submit(
        tenant=vision,
        spec=JobSpec(name="second", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )

    response = client_for(client, alice).get(reverse("tenant-detail", args=["vision"]))

    assert response.status_code == 200
    assert [j.name for j in response.context["queue"]] == ["first", "second"]
    assert response.context["queue"][0] == first
    assert response.context["usage_figure"]["data"][0]["y"] == ["slots", "bandwidth"]


def test_another_tenants_overview_is_404(client, bob, vision):
    assert client_for(client, bob).get(reverse("tenant-detail", args=["vision"])).status_code == 404


def test_only_a_site_admin_reaches_the_quota_page_and_the_overview_reflects_the_edit(
    client, alice, root, vision
):
    assert (
        client_for(client, alice).get(reverse("tenant-quota", args=["vision"])).status_code == 404
    )
    client_for(client, root)
    form = client.get(reverse("tenant-quota", args=["vision"])).context["form"]
    data = {k: ("" if v is None else v) for k, v in form.initial.items()}
    response = client.post(
        reverse("tenant-quota", args=["vision"]),
        {**data, "slot_quota": 7, "bandwidth_quota_mbps": 2500},
    )
    assert response.status_code == 302
    overview = client.get(reverse("tenant-detail", args=["vision"]))
    assert overview.context["usage"].slots_nominal == 7
    assert 'id="quota-slots">7<' in overview.text


def test_a_bad_quota_shows_the_services_reason(client, root, vision):
    client_for(client, root)
    form = client.get(reverse("tenant-quota", args=["vision"])).context["form"]
    data = {k: ("" if v is None else v) for k, v in form.initial.items()}
    response = client.post(
        reverse("tenant-quota", args=["vision"]), {**data, "fair_share_weight": 0}
    )
    assert response.status_code == 400
    assert response.context["form"].errors["fair_share_weight"]


def test_members_see_only_their_tenants_share_of_the_cluster(client, alice, bob, vision, speech):
    for tenant, actor in ((vision, alice), (speech, bob)):
        job = job_submit(
            tenant=tenant,
            spec=JobSpec(name=tenant.slug, workload="tiny_gpt", world_size=1, steps=5),
            actor=actor,
        )
        MetricSample.objects.create(
            job=job,
            step=1,
            reported_at=timezone.now(),
            data={"allocation_bps": 1e8, "samples_per_s": 5.0},
        )
    page = client_for(client, bob).get(reverse("cluster"))
    assert page.status_code == 200
    assert set(page.context["figures"]["allocation"]["meta"]["live"]) == {"speech"}
    assert "vision" not in page.text


def test_the_alarms_page_filters_and_a_member_acknowledges(client, alice, charlie, vision):
    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="j", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    drift = Alarm.objects.create(job=job, kind="sync_drift", raised_at=timezone.now())
    Alarm.objects.create(
        job=job, kind="straggler", raised_at=timezone.now(), cleared_at=timezone.now()
    )

    client_for(client, charlie)
    listed = client.get(reverse("alarm-list"), {"state": "open"}).context["alarms"]
    assert [a.kind for a in listed] == ["sync_drift"]
    assert client.post(reverse("alarm-acknowledge", args=[drift.pk])).status_code == 404  # a viewer

    client_for(client, alice)
    client.post(reverse("alarm-acknowledge", args=[drift.pk]), {"next": "/alarms/?state=open"})
    drift.refresh_from_db()
    assert drift.acknowledged and drift.acknowledged_by == alice
    assert [
        a.kind
        for a in client.get(reverse("alarm-list"), {"unacknowledged": "on"}).context["alarms"]
    ] == ["straggler"]


def test_another_tenants_alarm_is_neither_listed_nor_acknowledgeable(client, alice, bob, vision):
    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="j", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    alarm = Alarm.objects.create(job=job, kind="sync_drift", raised_at=timezone.now())
    client_for(client, bob)
    assert list(client.get(reverse("alarm-list")).context["alarms"]) == []
    assert client.post(reverse("alarm-acknowledge", args=[alarm.pk])).status_code == 404
