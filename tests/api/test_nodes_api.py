"""Cordon, drain and uncordon a node through the API: site admins only, bad input named."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from controlplane.jobs.choices import JobStatus, NodeState
from controlplane.jobs.models import Job, JobEvent, Node

from .conftest import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="x")


@pytest.fixture
def n1(db) -> Node:
    return Node.objects.create(
        name="n1.rack-2", slots=4, fabric_mbps=1000, last_seen=timezone.now(), address="10.0.0.1"
    )


def test_a_node_lists_its_state_address_labels_and_the_jobs_on_it(as_user, alice, vision, n1):
    n1.labels = {"gpu": "h200"}
    n1.save()
    job = make_job(vision, status="running", placement={"node": n1.name})
    (node,) = as_user(alice).get("/api/v1/nodes/").json()
    assert node["state"] == "ready" and node["link_state"] == "ok"
    assert (node["address"], node["labels"], node["jobs"], node["used"]) == (
        "10.0.0.1",
        {"gpu": "h200"},
        [job.pk],
        2,
    )


def test_ranks_placed_on_two_nodes_count_on_each(as_user, alice, vision, n1):
    Node.objects.create(name="n2", slots=4, fabric_mbps=1000, last_seen=timezone.now())
    placement = {
        "nodes": [{"node": n1.name, "ranks": [0, 1, 2]}, {"node": "n2", "ranks": [3]}],
        "why": "2 nodes",
    }
    make_job(vision, status="running", world_size=4, placement=placement)
    used = {n["name"]: n["used"] for n in as_user(alice).get("/api/v1/nodes/").json()}
    assert used == {n1.name: 3, "n2": 1}


def test_a_silent_node_is_lost(as_user, alice, n1, settings):
    settings.SYNCLANE_NODE_LOST_AFTER_S = 30
    Node.objects.filter(pk=n1.pk).update(last_seen=timezone.now() - dt.timedelta(seconds=31))
    (node,) = as_user(alice).get("/api/v1/nodes/").json()
    assert (node["state"], node["alive"]) == ("lost", False)


def test_an_admin_cordons_and_uncordons_a_node_with_a_reason(as_user, root, n1):
    body = as_user(root).post(
        f"/api/v1/nodes/{n1.name}/cordon/", {"reason": "kernel update"}, format="json"
    )
    assert body.status_code == 200, body.json()
    assert body.json()["state"] == "cordoned"
    assert body.json()["state_reason"] == "cordoned by root: kernel update"
    n1.refresh_from_db()
    assert n1.state == NodeState.CORDONED and n1.state_changed_at is not None
    again = as_user(root).post(f"/api/v1/nodes/{n1.name}/uncordon/")
    assert again.status_code == 200 and again.json()["state"] == "ready"


def test_a_drain_asks_each_job_on_the_node_to_checkpoint_and_requeue(as_user, root, vision, n1):
    Node.objects.create(name="n2", slots=4, fabric_mbps=1000, last_seen=timezone.now())
    here = make_job(vision, "here", status="running", placement={"node": n1.name})
    spans = make_job(
        vision,
        "spans",
        status="running",
        placement={"nodes": [{"node": "n2", "ranks": [0]}, {"node": n1.name, "ranks": [1]}]},
    )
    elsewhere = make_job(vision, "elsewhere", status="running", placement={"node": "n2"})
    admitted = make_job(
        vision,
        "admitted",
        status="admitted",
        placement={"nodes": [{"node": n1.name, "ranks": [0, 1]}]},
    )
    body = as_user(root).post(f"/api/v1/nodes/{n1.name}/drain/", {}, format="json").json()
    assert body["state"] == "draining"
    assert sorted(body["requeued"]) == sorted([here.pk, spans.pk, admitted.pk])
    for job in (here, spans):
        job.refresh_from_db()
        assert job.preempt_requested and job.status == JobStatus.RUNNING
        assert JobEvent.objects.filter(job=job, reason__contains="drained by root").exists()
    admitted.refresh_from_db()
    assert admitted.status == JobStatus.QUEUED  # not launched yet: straight back to the queue
    assert not Job.objects.get(pk=elsewhere.pk).preempt_requested
    # Asked once: a second drain asks nobody again.
    assert as_user(root).post(f"/api/v1/nodes/{n1.name}/drain/").json()["requeued"] == []


@pytest.mark.parametrize("action", ["cordon", "drain", "uncordon"])
def test_a_member_may_not_change_a_node(as_user, alice, n1, action):
    response = as_user(alice).post(f"/api/v1/nodes/{n1.name}/{action}/")
    assert response.status_code == 403
    assert Node.objects.get(pk=n1.pk).state == NodeState.READY


def test_an_unknown_node_is_a_404(as_user, root):
    assert as_user(root).post("/api/v1/nodes/nope/cordon/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"reason": 5}, "reason", "must be a string"),
        ({"reason": "x" * 201}, "reason", "must be at most 200 characters"),
        ({"why": "x"}, "why", "is not a known field"),
        (["reason"], "body", "must be a JSON object"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(as_user, root, n1, body, field, message):
    response = as_user(root).post(f"/api/v1/nodes/{n1.name}/drain/", body, format="json")
    assert response.status_code == 400
    assert response.json()[field] == [message]
    assert Node.objects.get(pk=n1.pk).state == NodeState.READY


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("gpu=h200", 'must be an object of label: value strings, e.g. {"gpu": "h200"}'),
        ({"gpu": 5}, "label gpu: value 5 must be at most 63 letters, digits, '.', '_', '-'"),
        ({"bad key": "x"}, "label key 'bad key' must be 1-63 letters, digits, '.', '_', '-', '/'"),
    ],
)
def test_a_bad_node_selector_is_a_400_naming_it(as_user, alice, vision, selector, message):
    body = {"tenant": "vision", "name": "j", "workload": "tiny_gpt", "world_size": 1, "steps": 5}
    response = as_user(alice).post(
        "/api/v1/jobs/", {**body, "node_selector": selector}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["node_selector"] == [message]
    assert not Job.objects.exists()


def test_a_node_selector_is_kept_and_shown(as_user, alice, vision):
    body = {"tenant": "vision", "name": "j", "workload": "tiny_gpt", "world_size": 1, "steps": 5}
    response = as_user(alice).post(
        "/api/v1/jobs/", {**body, "node_selector": {"gpu": "h200"}}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["node_selector"] == {"gpu": "h200"}
    assert Job.objects.get().node_selector == {"gpu": "h200"}
