"""Idempotency-Key on job submission: a retry gets the first answer, never a second job."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from controlplane.jobs.models import IdempotencyKey, Job

from ..fuzz import FUZZ

BODY = {"tenant": "vision", "name": "once", "workload": "tiny_gpt", "world_size": 2, "steps": 20}
OTHER_BODY = {**BODY, "steps": 40}


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(client: APIClient, body, key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(
        "/api/v1/jobs/", data=json.dumps(body), content_type="application/json", **headers
    )


@pytest.fixture
def api(alice) -> APIClient:
    return client_for(alice)


def test_a_retry_with_the_same_key_and_body_gets_the_same_answer_and_no_second_job(api):
    first = submit(api, BODY, key="retry-1")
    again = submit(api, BODY, key="retry-1")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Job.objects.count() == 1


def test_the_same_key_with_another_body_is_a_422_that_names_the_header_and_writes_nothing(api):
    first = submit(api, BODY, key="retry-2")
    jobs, keys = Job.objects.count(), IdempotencyKey.objects.count()

    reused = submit(api, OTHER_BODY, key="retry-2")

    assert reused.status_code == 422
    assert "another request body" in reused.json()["Idempotency-Key"][0]
    assert f"job {first.json()['id']}" in reused.json()["detail"]
    assert (Job.objects.count(), IdempotencyKey.objects.count()) == (jobs, keys)


def test_key_order_and_spacing_of_the_body_do_not_make_it_another_body(api):
    submit(api, BODY, key="retry-3")
    reordered = dict(reversed(list(BODY.items())))
    assert submit(api, reordered, key="retry-3").status_code == 201
    assert Job.objects.count() == 1


def test_without_a_key_every_submit_is_a_new_job(api):
    submit(api, BODY)
    submit(api, BODY)
    assert Job.objects.count() == 2


def test_keys_belong_to_their_user(api, bob):
    submit(api, BODY, key="shared-name")
    theirs = submit(client_for(bob), {**BODY, "tenant": "speech"}, key="shared-name")
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs.headers
    assert Job.objects.count() == 2


def test_a_refused_submit_is_not_remembered_so_the_corrected_one_can_use_the_key(api):
    refused = submit(api, {**BODY, "world_size": 0}, key="fix-and-retry")
    assert refused.status_code == 400 and "world_size" in refused.json()
    assert not IdempotencyKey.objects.exists() and not Job.objects.exists()

    assert submit(api, BODY, key="fix-and-retry").status_code == 201


@pytest.mark.parametrize("key", ["", "x" * 256, "naïve", "tab\there"])
def test_a_malformed_key_is_a_400_naming_the_header_and_writes_nothing(api, key):
    response = submit(api, BODY, key=key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()
    assert not Job.objects.exists()


def test_a_key_older_than_the_window_starts_afresh(api, settings):
    submit(api, BODY, key="old")
    settings.SYNCLANE_IDEMPOTENCY_WINDOW_S = 0  # every remembered key is now expired

    again = submit(api, OTHER_BODY, key="old")

    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    assert Job.objects.count() == 2 and IdempotencyKey.objects.count() == 1


# --- property: any sequence of keyed and unkeyed submits ----------------------------------

bodies = st.sampled_from([BODY, OTHER_BODY, {**BODY, "name": "third"}])
keys = st.none() | st.sampled_from(["a", "b", "c"])


@FUZZ
@given(requests=st.lists(st.tuples(keys, bodies), min_size=1, max_size=6))
def test_any_sequence_of_submits_makes_one_job_per_new_key_or_unkeyed_request(api, requests):
    run = uuid.uuid4().hex  # every example gets keys of its own
    first_answers: dict[str, tuple[dict, dict]] = {}  # key -> (body sent, answer)
    jobs_before, expected_new = Job.objects.count(), 0
    for key, body in requests:
        response = submit(api, body, key=None if key is None else f"{run}-{key}")
        if key is None or key not in first_answers:
            assert response.status_code == 201, response.content
            expected_new += 1
            if key is not None:
                first_answers[key] = (body, response.json())
        elif first_answers[key][0] == body:
            assert response.status_code == 201
            assert response.json() == first_answers[key][1]
        else:
            assert response.status_code == 422, response.content
    assert Job.objects.count() == jobs_before + expected_new
