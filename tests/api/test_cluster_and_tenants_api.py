"""Tenants, nodes and allocations, each scoped to the caller's tenants."""

from __future__ import annotations

from django.utils import timezone

from controlplane.jobs.models import Node
from controlplane.telemetry.models import MetricSample

from .conftest import make_job


def test_a_member_lists_only_their_tenants_with_their_role(as_user, alice, bob, speech):
    tenants = as_user(alice).get("/api/v1/tenants/").json()
    assert [(t["slug"], t["role"]) for t in tenants] == [("vision", "tenant_admin")]


def test_a_tenant_shows_its_usage(as_user, alice, vision):
    make_job(vision, status="running", allocation_mbps=250.0)
    body = as_user(alice).get("/api/v1/tenants/vision/").json()
    assert (body["usage"]["slots_used"], body["usage"]["bandwidth_used_mbps"]) == (2, 250.0)


def test_another_tenant_is_a_404(as_user, bob, vision):
    assert as_user(bob).get("/api/v1/tenants/vision/").status_code == 404


def test_nodes_show_slots_used_by_visible_jobs_and_liveness(as_user, alice, vision):
    Node.objects.create(name="n1", slots=4, fabric_mbps=1000, last_seen=timezone.now())
    make_job(vision, status="running", placement={"node": "n1"})
    (node,) = as_user(alice).get("/api/v1/nodes/").json()
    assert (node["name"], node["slots"], node["used"], node["alive"]) == ("n1", 4, 2, True)


def test_allocations_list_active_jobs_of_your_tenants_only(as_user, bob, vision, speech):
    make_job(vision, status="running", allocation_mbps=400.0)
    mine = make_job(speech, status="running", allocation_mbps=100.0)
    make_job(speech, status="queued")
    rows = as_user(bob).get("/api/v1/allocations/").json()
    assert [(r["job"], r["allocation_mbps"]) for r in rows] == [(mine.pk, 100.0)]


def test_the_cluster_share_shows_only_your_tenants_allocation_and_throughput(
    as_user, bob, vision, speech
):
    now = timezone.now()
    for tenant, mbps in ((vision, 400.0), (speech, 100.0)):
        job = make_job(tenant, status="running")
        MetricSample.objects.create(
            job=job,
            step=1,
            reported_at=now,
            data={"allocation_bps": mbps * 1e6, "samples_per_s": 50.0},
        )
    share = as_user(bob).get("/api/v1/cluster/share/").json()
    assert set(share["allocation"]) == {"speech"}
    assert share["allocation"]["speech"]["y"] == [100.0]
    assert len(share["throughput"]) == 1
