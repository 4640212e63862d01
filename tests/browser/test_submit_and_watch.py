"""A user logs in, submits a job in the form, and watches the live chart draw."""

from __future__ import annotations

import pytest

from ..conftest import PASSWORD
from .conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page, live, username: str) -> None:
    page.goto(f"{live.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live.url}/")


def submit_form(page, *, name: str, world_size: str, steps: str) -> None:
    page.select_option("select[name=tenant]", "vision")
    page.fill("input[name=name]", name)
    page.select_option("select[name=workload]", "tiny_gpt")  # the form's default is own code
    page.fill("input[name=world_size]", world_size)
    page.fill("input[name=steps]", steps)
    page.click("form.submit-form button[type=submit]")


def test_a_user_submits_a_job_and_sees_the_live_chart_draw(page, live, alice):
    log_in(page, live, "alice")
    submit_form(page, name="from the browser", world_size="2", steps="40")

    page.wait_for_url(f"{live.url}/jobs/*/")
    wait_for(page, "document.getElementById('live-state').textContent === 'live'", timeout_s=15)
    # Points arrive over the websocket (nothing polls), so the count grows while it runs.
    wait_for(page, "window.synclane.points >= 3", timeout_s=120)
    drawn = page.evaluate("document.getElementById('chart-loss').data[0].x.length")
    assert drawn >= 3
    wait_for(
        page, "document.getElementById('job-status').textContent === 'succeeded'", timeout_s=120
    )
    assert "running → succeeded" in page.inner_text("#events").replace("\n", " ")


def test_the_form_shows_the_reason_for_a_bad_field(page, live, alice):
    log_in(page, live, "alice")
    submit_form(page, name="too wide", world_size="999", steps="10")
    error = page.locator(".field-error[data-field=world_size]")
    assert "between 1 and" in error.inner_text()


def test_bob_gets_a_404_for_alices_job_page(page, live, alice, bob):
    token = live.token("alice", PASSWORD)
    _, job = live.request(
        "POST",
        "/api/v1/jobs/",
        {
            "tenant": "vision",
            "name": "private",
            "workload": "tiny_gpt",
            "world_size": 1,
            "steps": 1,
        },
        token=token,
    )
    log_in(page, live, "bob")
    response = page.goto(f"{live.url}/jobs/{job['id']}/")
    assert response.status == 404
    assert "private" not in page.content()
