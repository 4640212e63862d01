"""Every page works under its Content-Security-Policy: Chromium reports no violation."""

from __future__ import annotations

import pytest

from ..conftest import PASSWORD
from .conftest import wait_for
from .test_submit_and_watch import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Recorded before any page script runs; Chromium fires this event for each blocked thing.
RECORD_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


def violations_on(page, url: str) -> list[str]:
    """Open ``url`` and return what its policy blocked ("directive blocked-uri")."""
    response = page.goto(url)
    assert response.status == 200 and response.headers["content-security-policy"]
    page.wait_for_load_state("networkidle")
    return page.evaluate("window.cspViolations")


def test_no_page_violates_its_content_security_policy(page, live, alice):
    console = []
    page.on("console", lambda msg: console.append(msg.text))
    page.add_init_script(RECORD_VIOLATIONS)
    token = live.token("alice", PASSWORD)
    spec = {"tenant": "vision", "name": "csp", "workload": "tiny_gpt", "world_size": 1, "steps": 5}
    status, job = live.request("POST", "/api/v1/jobs/", spec, token=token)
    assert status == 201, job
    log_in(page, live, "alice")
    pages = ["/", f"/jobs/{job['id']}/", "/bundles/", "/tenants/vision/", "/cluster/", "/alarms/"]
    for path in pages:
        assert violations_on(page, f"{live.url}{path}") == [], path
    page.goto(f"{live.url}/jobs/{job['id']}/")
    # The page's static scripts ran: charts drawn and the live socket open.
    wait_for(page, "document.getElementById('live-state').textContent === 'live'", timeout_s=15)
    assert page.evaluate("document.getElementById('chart-loss').data !== undefined")
    assert not [line for line in console if "Content Security Policy" in line]
    # Vendored pages: every script runs; what the policy blocks there is their fetches of
    # fonts and images from outside (Redoc asks a font CDN), which is the policy's point.
    for path in ["/api/docs/", "/api/redoc/", "/admin/"]:
        blocked = violations_on(page, f"{live.url}{path}")
        assert not [v for v in blocked if v.startswith("script-src")], (path, blocked)
        assert all(v.split(" ", 1)[1].startswith("https://") for v in blocked), (path, blocked)
