"""Submitting many jobs in one request (a sweep): all are queued in order, or none is."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.jobs.models import IdempotencyKey, Job, JobEvent

BATCH = "/api/v1/jobs/batch/"


@pytest.fixture
def api(alice) -> APIClient:
    client = APIClient()
    client.force_authenticate(alice)
    return client


def sweep(spec_input, count: int) -> list[dict]:
    return [
        {**spec_input, "name": f"lr-{i}", "hyperparameters": {"lr": 0.1 / (i + 1)}}
        for i in range(count)
    ]


def test_a_batch_queues_every_job_in_order_with_an_event_each(api, alice, spec_input):
    response = api.post(BATCH, {"tenant": "vision", "jobs": sweep(spec_input, 3)}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()["jobs"]
    assert [j["name"] for j in body] == ["lr-0", "lr-1", "lr-2"]
    assert [j["queue_position"] for j in body] == [1, 2, 3]
    assert {(j["tenant"], j["status"]) for j in body} == {("vision", "queued")}
    jobs = Job.objects.filter(pk__in=[j["id"] for j in body])
    assert {j.submitted_by for j in jobs} == {alice}
    assert sorted(j.hyperparameters["lr"] for j in jobs) == pytest.approx([0.1 / 3, 0.05, 0.1])
    assert JobEvent.objects.filter(job__in=jobs, reason="submitted").count() == 3


def test_one_bad_job_refuses_the_batch_naming_it_and_writes_nothing(api, spec_input):
    jobs = sweep(spec_input, 3)
    jobs[1]["world_size"] = 0
    jobs[2]["world_size"] = 6  # larger than the cluster (4 slots)
    response = api.post(BATCH, {"tenant": "vision", "jobs": jobs}, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert "jobs[1].world_size" in errors and "jobs[0].world_size" not in errors
    assert Job.objects.count() == 0
    # The cluster check comes once each job parses: the second bad job is named then.
    jobs[1]["world_size"] = 1
    response = api.post(BATCH, {"tenant": "vision", "jobs": jobs}, format="json")
    assert response.json()["jobs[2].world_size"] == ["needs 6 slots; the cluster has 4"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tenant": "vision"}, "jobs"),
        ({"tenant": "vision", "jobs": []}, "jobs"),
        ({"tenant": "vision", "jobs": {"name": "x"}}, "jobs"),
        ({"tenant": "vision", "jobs": ["x"]}, "jobs[0]"),
        ({"tenant": "vision", "jobs": [{"tenant": "vision"}]}, "jobs[0].tenant"),
        ({"tenant": "vision", "jobs": [], "priority": "high"}, "priority"),
        ({"jobs": [{"name": "x"}]}, "tenant"),
    ],
)
def test_a_malformed_batch_is_a_400_naming_the_field(api, body, field):
    response = api.post(BATCH, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert Job.objects.count() == 0


def test_a_batch_over_the_limit_is_refused(api, spec_input, settings):
    settings.SYNCLANE_SUBMIT_BATCH_MAX = 2
    response = api.post(BATCH, {"tenant": "vision", "jobs": sweep(spec_input, 3)}, format="json")
    assert response.status_code == 400
    assert response.json()["jobs"] == ["must be a list of 1 to 2 job objects"]
    assert Job.objects.count() == 0


def test_another_tenants_batch_is_refused_without_writing(api, speech, spec_input):
    response = api.post(BATCH, {"tenant": "speech", "jobs": sweep(spec_input, 2)}, format="json")
    assert response.status_code == 400
    assert "tenant" in response.json()
    assert Job.objects.count() == 0


def test_a_retried_batch_with_its_key_gets_the_first_answer_and_no_more_jobs(api, spec_input):
    body = {"tenant": "vision", "jobs": sweep(spec_input, 2)}
    first = api.post(BATCH, body, format="json", HTTP_IDEMPOTENCY_KEY="sweep-1")
    again = api.post(BATCH, body, format="json", HTTP_IDEMPOTENCY_KEY="sweep-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Job.objects.count() == 2 and IdempotencyKey.objects.count() == 1
    other = {"tenant": "vision", "jobs": sweep(spec_input, 3)}
    assert api.post(BATCH, other, format="json", HTTP_IDEMPOTENCY_KEY="sweep-1").status_code == 422
    assert Job.objects.count() == 2
