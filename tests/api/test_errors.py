"""Every API error has one body shape: {"detail": message, "<field>": [reasons]}."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

from controlplane.bundles.services import BundleInUse
from controlplane.jobs.models import Job
from controlplane.jobs.services import ArtifactsInUse
from controlplane.lib.api_errors import error_body, exception_handler
from controlplane.lib.conflict import Conflict


def test_a_missing_job_is_a_404_with_only_a_detail(as_user, alice):
    response = as_user(alice).get("/api/v1/jobs/999/")
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}


def test_bad_input_names_each_field_and_sums_them_up_in_detail(as_user, alice):
    response = as_user(alice).post(
        "/api/v1/jobs/", {"tenant": "vision", "name": "x", "workload": "nope"}, format="json"
    )
    body = response.json()
    assert response.status_code == 400
    assert {"workload", "world_size", "steps"} <= set(body)
    assert body["detail"].startswith("Invalid input: ") and "workload" in body["detail"]
    assert all(isinstance(v, list) for k, v in body.items() if k != "detail")
    assert Job.objects.count() == 0


def test_an_anonymous_caller_gets_a_detail(api):
    response = api.get("/api/v1/jobs/")
    assert response.status_code in (401, 403)
    assert set(response.json()) == {"detail"}


def test_nested_and_non_field_errors_become_dotted_names_and_lists():
    body = error_body({"hyperparameters": {"lr": ["too big"]}, "steps": "is required"})
    assert body == {
        "detail": "Invalid input: hyperparameters.lr, steps.",
        "hyperparameters.lr": ["too big"],
        "steps": ["is required"],
    }
    assert error_body(["no"]) == {
        "detail": "Invalid input: non_field_errors.",
        "non_field_errors": ["no"],
    }


def test_a_conflict_raised_by_a_service_is_a_409_with_its_message_as_detail():
    response = exception_handler(Conflict("job 7 is running; try once it ends"), {})
    assert response is not None and response.status_code == 409
    assert response.data == {"detail": "job 7 is running; try once it ends"}


def test_both_in_use_refusals_are_conflicts_the_handler_answers():
    # The artifacts and bundles delete views no longer map these by hand.
    for refusal in (BundleInUse("bundle 9f2c is used"), ArtifactsInUse("job 7 is running")):
        assert isinstance(refusal, Conflict)
        assert exception_handler(refusal, {}).status_code == 409


def boom(request):
    raise RuntimeError("a secret the client must not see")


# This module is also the URLconf of the 500 test below (pytest.mark.urls).
urlpatterns = [path("api/v1/boom/", boom), path("boom/", boom)]
handler500 = "controlplane.lib.api_errors.server_error"


def test_an_api_path_no_view_owns_is_a_404_with_only_a_detail(as_user, alice):
    response = as_user(alice).get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


def test_a_page_no_view_owns_is_still_an_html_404(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.urls("tests.api.test_errors")
def test_an_unhandled_exception_under_the_api_is_a_500_with_only_a_detail():
    client = Client(raise_request_exception=False)
    response = client.get("/api/v1/boom/")
    assert response.status_code == 500
    assert response.json() == {"detail": "Internal server error."}
    assert b"secret" not in response.content
    page = client.get("/boom/")
    assert page.status_code == 500
    assert page["Content-Type"].startswith("text/html")
