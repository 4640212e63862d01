from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.jobs.models import Job
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.tenancy.models import Tenant


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_superuser("root", password="x" * 12)


def client_for(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def run_job(tenant, actor, ranks: int, **fields) -> Job:
    job = job_submit(
        tenant=tenant,
        spec=JobSpec(name="r", workload="tiny_gpt", world_size=ranks, steps=5),
        actor=actor,
    )
    Job.objects.filter(pk=job.pk).update(status="running", **fields)
    return job


def test_a_member_reads_their_tenants_usage(alice, vision):
    run_job(vision, alice, 3, allocation_mbps=250.0)
    body = client_for(alice).get("/api/v1/tenants/vision/usage/").json()
    assert (body["slots_used"], body["slots_nominal"], body["slots_borrowed"]) == (3, 4, 0)
    assert (body["bandwidth_used_mbps"], body["running_jobs"]) == (250.0, 1)


def test_another_tenants_usage_is_a_404(bob, vision):
    assert client_for(bob).get("/api/v1/tenants/vision/usage/").status_code == 404


def test_only_site_admins_see_and_change_quotas(alice, admin, vision):
    assert client_for(alice).get("/api/v1/tenants/vision/quota/").status_code == 404
    assert (
        client_for(alice)
        .patch("/api/v1/tenants/vision/quota/", {"slot_quota": 9}, format="json")
        .status_code
        == 404
    )
    body = client_for(admin).get("/api/v1/tenants/vision/quota/").json()
    assert body["slot_quota"] == 4 and body["tenant"] == "vision"


def test_a_site_admin_changes_a_quota(admin, vision):
    response = client_for(admin).patch(
        "/api/v1/tenants/vision/quota/",
        {"slot_quota": 6, "cohort": "research", "slot_borrowing_limit": 2},
        format="json",
    )
    assert response.status_code == 200
    vision.refresh_from_db()
    assert (vision.slot_quota, vision.cohort, vision.slot_borrowing_limit) == (6, "research", 2)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"slot_quota": -1}, "slot_quota"),
        ({"slot_quota": "many"}, "slot_quota"),
        ({"fair_share_weight": 0}, "fair_share_weight"),
        ({"warp_drive": 1}, "warp_drive"),
        ({"slot_quota": 2, "on_overuse": "shrug"}, "on_overuse"),
    ],
)
def test_an_invalid_quota_is_a_400_naming_the_field_and_changes_nothing(
    admin, vision, change, field
):
    response = client_for(admin).patch("/api/v1/tenants/vision/quota/", change, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert Tenant.objects.get(pk=vision.pk).slot_quota == 4


def test_a_quota_below_current_use_asks_what_to_do(admin, alice, vision):
    run_job(vision, alice, 4)
    response = client_for(admin).patch(
        "/api/v1/tenants/vision/quota/", {"slot_quota": 2}, format="json"
    )
    assert response.status_code == 400
    assert "holds 4 slots" in response.json()["on_overuse"][0]
    assert Tenant.objects.get(pk=vision.pk).slot_quota == 4


def test_next_admission_keeps_running_jobs(admin, alice, vision):
    job = run_job(vision, alice, 4)
    response = client_for(admin).patch(
        "/api/v1/tenants/vision/quota/",
        {"slot_quota": 2, "on_overuse": "next_admission"},
        format="json",
    )
    assert response.status_code == 200
    assert not Job.objects.get(pk=job.pk).preempt_requested


def test_preempt_stops_the_newest_lowest_priority_jobs_first(admin, alice, vision):
    older = run_job(vision, alice, 2)
    newer = run_job(vision, alice, 2)
    response = client_for(admin).patch(
        "/api/v1/tenants/vision/quota/", {"slot_quota": 2, "on_overuse": "preempt"}, format="json"
    )
    assert response.status_code == 200
    assert [Job.objects.get(pk=j.pk).preempt_requested for j in (older, newer)] == [False, True]


def test_a_tenant_admin_changes_a_jobs_priority_but_a_member_cannot(alice, bob, vision, speech):
    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="p", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    assert (
        client_for(alice)
        .post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "critical"}, format="json")
        .json()["priority"]
        == "critical"
    )
    assert (
        client_for(alice)
        .post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "urgent"}, format="json")
        .status_code
        == 400
    )
    assert (
        client_for(bob)
        .post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "low"}, format="json")
        .status_code
        == 404
    )
