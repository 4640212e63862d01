"""Drain with a real worker: the node's running job checkpoints and requeues, the drained node
takes nothing new, and after an uncordon the job resumes from its checkpoint."""

from __future__ import annotations

import pytest
from django.db.models import F

from controlplane.jobs.models import Job, Node
from tests.faults import wait_until

from ..conftest import PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_drained_nodes_job_checkpoints_requeues_and_resumes_after_uncordon(
    live, alice, admin_user, vision
):
    admin_user.set_password(PASSWORD)
    admin_user.save()
    admin = live.token(admin_user.username, PASSWORD)
    token = live.token("alice", PASSWORD)
    body = {
        "tenant": "vision", "name": "long", "workload": "tiny_gpt", "world_size": 1,
        "sync": "full", "steps": 100_000, "hyperparameters": {"checkpoint_every": 5},
    }  # fmt: skip
    status, job = live.request("POST", "/api/v1/jobs/", body, token=token)
    assert status == 201, job
    wait_until(lambda: (Job.objects.get(pk=job["id"]).last_step or 0) >= 8, 180, "it to train")
    (node,) = Job.objects.get(pk=job["id"]).node_names
    try:
        status, drained = live.request("POST", f"/api/v1/nodes/{node}/drain/", {}, token=admin)
        assert status == 200, drained
        assert (drained["state"], drained["requeued"]) == ("draining", [job["id"]])
        # The node was the cluster's only one: the job checkpoints, requeues and waits.
        live.wait_for_job(job["id"], token, {"queued"}, timeout=120)
        wait_until(
            lambda: Node.objects.get(name=node).state == "cordoned", 60, "the drain to settle"
        )
        assert Job.objects.get(pk=job["id"]).status == "queued"
        checkpoint = Job.objects.get(pk=job["id"]).checkpoint_step
        assert checkpoint and checkpoint >= 8
    finally:
        live.request("POST", f"/api/v1/nodes/{node}/uncordon/", token=admin)
    live.wait_for_job(job["id"], token, {"running"}, timeout=120)
    resumed = Job.objects.get(pk=job["id"])
    path = list(
        resumed.events.exclude(from_status=F("to_status")).values_list("to_status", flat=True)
    )
    assert path[:6] == ["admitted", "running", "preempted", "queued", "admitted", "running"], path
    assert resumed.resumed_from_step == checkpoint
    assert resumed.events.filter(reason__contains=f"node {node} drained by").exists()
    live.request("POST", f"/api/v1/jobs/{job['id']}/cancel/", token=token)
    live.wait_for_job(job["id"], token, {"cancelled"}, timeout=60)
