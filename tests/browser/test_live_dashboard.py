"""The live dashboard in Chromium: a running job's charts grow, links and alarms arrive.

Link measurements and the drift alarm are injected exactly as a run sends them: a
``workers.runtime.reporter.Reporter`` writing to the job's Redis stream, read by the real
ingest and pushed over the real websocket. ``make screenshots`` runs this module with
SYNCLANE_SCREENSHOTS=docs/screenshots to refresh the README's pictures.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from workers.runtime.reporter import Reporter

from ..conftest import PASSWORD
from .conftest import wait_for
from .test_submit_and_watch import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = os.environ.get("SYNCLANE_SCREENSHOTS")


def shoot(page, name: str) -> None:
    """Save a full-page screenshot when asked to (make screenshots)."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.wait_for_timeout(400)  # let Plotly finish its transitions
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def submit(live, user: str, **spec) -> int:
    token = live.token(user, PASSWORD)
    body = {
        "tenant": "vision",
        "name": "live-demo",
        "workload": "tiny_gpt",
        "world_size": 2,
        "steps": 80,
        **spec,
    }
    status, job = live.request("POST", "/api/v1/jobs/", body, token=token)
    assert status == 201, job
    return int(job["id"])


def reporter_for(job_id: int) -> Reporter:
    return Reporter(redis_url=settings.REDIS_URL, job_id=str(job_id), rank=0)


def test_a_running_jobs_page_grows_shows_links_and_a_drift_alarm_raised_then_cleared(
    page, live, alice, django_user_model
):
    # Adaptive sync reports drift; 2000 steps keep it running; it is cancelled at the end.
    job_id = submit(live, "alice", steps=2000, sync="adaptive")
    log_in(page, live, "alice")
    page.goto(f"{live.url}/jobs/{job_id}/")
    wait_for(page, "document.getElementById('live-state').textContent === 'live'", timeout_s=15)

    # 1. The loss chart gains points while the run trains.
    wait_for(page, "window.synclane.points >= 3", timeout_s=120)
    seen = page.evaluate("window.synclane.points")
    wait_for(page, f"window.synclane.points > {seen}", timeout_s=60)

    # 2. A probe round fills the heatmap.
    run = reporter_for(job_id)
    for src, dst, mbps, state in ((0, 1, 940.0, "ok"), (1, 0, 120.0, "degraded")):  # probe round
        run.link(
            src=src,
            dst=dst,
            step=5,
            latency_s=0.0008,
            bandwidth_bps=mbps * 1e6,
            jitter_s=0.0001,
            state=state,
        )
    # The run probes its links too (pairs src < dst); the injected 1 -> 0 pair is degraded.
    wait_for(page, "window.synclane.links.state[1][0] === 'degraded'", timeout_s=5)
    z = page.evaluate("document.getElementById('chart-heatmap').data[0].z")
    assert z[1][0] == 1 and z[0][1] in (0, 1)

    # 3. A drift alarm shows in the list within seconds, then clears.
    run.alarm("sync_drift", value=0.21, threshold=0.05, step=12, detail="rank 1 drifted 0.2100")
    page.wait_for_selector("#alarm-rows tr.alarm-open[data-kind=sync_drift]", timeout=5_000)
    assert "0.21" in page.inner_text("#alarm-rows")
    # 4. The live log shows rank 0's output as it is written, and rank 1's when picked.
    wait_for(
        page, "document.getElementById('log-view').textContent.includes('tiny_gpt:')", timeout_s=30
    )
    lines = page.evaluate("window.synclane.logLines")
    wait_for(page, f"window.synclane.logLines > {lines}", timeout_s=30)  # still live
    page.select_option("#log-source", "1")
    assert "tiny_gpt:" not in page.inner_text("#log-view")  # rank 0 alone prints the banner
    page.select_option("#log-source", "0")
    shoot(page, "job")
    run.alarm(
        "sync_drift", value=0.01, threshold=0.05, step=20, state="cleared", detail="drift recovered"
    )
    page.wait_for_selector("#alarm-rows tr.alarm-cleared[data-kind=sync_drift]", timeout=5_000)
    assert page.locator("#alarm-rows tr.alarm-open").count() == 0
    run.close()

    # 5. A dropped socket reconnects and backfills what it missed.
    page.evaluate("window.synclaneSocket.close()")
    wait_for(page, "window.synclane.backfills >= 1", timeout_s=15)
    assert page.inner_text("#live-state") == "live"

    # The other pages, while the run is live (screenshots for the README).
    page.goto(f"{live.url}/tenants/vision/")
    page.wait_for_selector("#chart-usage .main-svg")
    shoot(page, "tenant")
    page.goto(f"{live.url}/alarms/")
    assert "sync_drift" in page.inner_text("#alarm-rows")
    shoot(page, "alarms")
    root = django_user_model.objects.create_superuser(username="root", password=PASSWORD)
    assert root.is_superuser
    page.context.clear_cookies()
    log_in(page, live, "root")
    page.goto(f"{live.url}/cluster/")
    wait_for(page, "document.getElementById('live-state').textContent === 'live'", timeout_s=15)
    page.wait_for_timeout(2_500)  # a couple of live allocation/throughput points
    shoot(page, "cluster")
    token = live.token("alice", PASSWORD)
    live.request("POST", f"/api/v1/jobs/{job_id}/cancel/", token=token)
    live.wait_for_job(job_id, token, {"cancelled"}, timeout=60)


def test_a_site_admin_edits_a_quota_and_the_tenant_overview_shows_it(
    page, live, alice, django_user_model
):
    django_user_model.objects.create_superuser(username="root", password=PASSWORD)
    log_in(page, live, "root")
    page.goto(f"{live.url}/tenants/vision/quota/")
    page.fill("input[name=slot_quota]", "6")
    page.fill("input[name=bandwidth_quota_mbps]", "2500")
    shoot(page, "quota")
    page.click("form.quota-form button[type=submit]")
    page.wait_for_url(f"{live.url}/tenants/vision/")
    assert page.inner_text("#quota-slots") == "6"
    assert page.inner_text("#quota-bandwidth") == "2500 Mbit/s"


def test_a_viewer_of_another_tenant_is_told_no_on_the_socket(page, live, alice, bob):
    job_id = submit(live, "alice", steps=1, world_size=1)
    log_in(page, live, "bob")
    response = page.goto(f"{live.url}/jobs/{job_id}/")
    assert response.status == 404
    # Open the socket by hand from bob's page: the server closes it with 4404.
    page.goto(f"{live.url}/alarms/")
    code = page.evaluate(
        """(id) => new Promise((done) => {
             const ws = new WebSocket(`ws://${location.host}/ws/jobs/${id}/`);
             ws.onclose = (e) => done(e.code);
           })""",
        job_id,
    )
    assert code == 4404
