from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.jobs.models import Job, JobEvent

from ..conftest import PASSWORD


@pytest.fixture
def api() -> APIClient:
    return APIClient()


def login(api: APIClient, user) -> APIClient:
    api.force_authenticate(user)
    return api


def submit(api: APIClient, **data):
    return api.post("/api/v1/jobs/", data, format="json")


def test_a_token_is_issued_for_a_valid_password_and_authenticates(api, alice, spec_input):
    response = api.post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 200
    token = response.json()["token"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert submit(api, tenant="vision", **spec_input).status_code == 201


def test_a_wrong_password_gets_no_token(api, alice):
    response = api.post("/api/v1/auth/token/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 400
    assert "token" not in response.json()


def test_anonymous_callers_are_refused(api):
    assert api.get("/api/v1/jobs/").status_code in (401, 403)


def test_submitting_creates_a_queued_job_with_an_event(api, alice, spec_input):
    response = submit(login(api, alice), tenant="vision", **spec_input, priority="high")
    assert response.status_code == 201
    body = response.json()
    assert (body["tenant"], body["status"], body["priority"], body["queue_position"]) == (
        "vision",
        "queued",
        "high",
        1,
    )
    job = Job.objects.get(pk=body["id"])
    assert job.submitted_by == alice
    assert JobEvent.objects.filter(job=job, reason="submitted").exists()


def test_bad_input_is_a_400_naming_each_field_and_writes_nothing(api, alice):
    response = submit(
        login(api, alice), tenant="vision", name="x", workload="tiny_gpt", world_size=0
    )
    assert response.status_code == 400
    assert set(response.json()) == {"detail", "world_size", "steps"}
    assert Job.objects.count() == 0


def test_submitting_to_another_tenant_is_refused_without_writing(api, alice, speech, spec_input):
    response = submit(login(api, alice), tenant="speech", **spec_input)
    assert response.status_code == 400
    assert "tenant" in response.json()
    assert Job.objects.count() == 0


def test_a_viewer_cannot_submit(api, charlie, spec_input):
    response = submit(login(api, charlie), tenant="vision", **spec_input)
    assert response.status_code == 400
    assert "tenant" in response.json()


def test_a_member_lists_only_their_tenants_jobs(api, alice, bob, spec_input):
    submit(login(api, alice), tenant="vision", **spec_input)
    submit(login(api, bob), tenant="speech", **spec_input)
    names = [j["tenant"] for j in login(api, bob).get("/api/v1/jobs/").json()["results"]]
    assert names == ["speech"]


def test_another_tenants_job_is_a_404_to_fetch_and_to_cancel(api, alice, bob, spec_input):
    job_id = submit(login(api, alice), tenant="vision", **spec_input).json()["id"]
    login(api, bob)
    assert api.get(f"/api/v1/jobs/{job_id}/").status_code == 404
    assert api.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404
    assert Job.objects.get(pk=job_id).status == "queued"


def test_cancelling_a_queued_job_ends_it_at_once(api, alice, spec_input):
    job_id = submit(login(api, alice), tenant="vision", **spec_input).json()["id"]
    response = api.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"


def test_a_viewer_sees_the_job_but_cannot_cancel_it(api, alice, charlie, spec_input):
    job_id = submit(login(api, alice), tenant="vision", **spec_input).json()["id"]
    login(api, charlie)
    assert api.get(f"/api/v1/jobs/{job_id}/").status_code == 200
    assert api.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404


def test_a_job_larger_than_the_cluster_is_refused_at_submit(api, alice, spec_input):
    response = submit(login(api, alice), tenant="vision", **{**spec_input, "world_size": 6})
    assert response.status_code == 400
    assert response.json()["world_size"] == ["needs 6 slots; the cluster has 4"]
    assert Job.objects.count() == 0


def test_a_floor_above_the_fabric_is_refused(api, alice, spec_input):
    response = submit(login(api, alice), tenant="vision", **spec_input, bandwidth_floor_mbps=5000)
    assert response.status_code == 400
    assert response.json()["bandwidth_floor_mbps"] == ["exceeds the cluster fabric of 1000 Mbit/s"]
