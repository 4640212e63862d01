"""Bandwidth is enforced: a run's achieved wire rate follows its allocation, live."""

from __future__ import annotations

import time

import pytest

from controlplane.jobs.models import Job
from controlplane.telemetry.models import MetricSample

from ..conftest import PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
MBIT = 1e6


def samples_at(job_id: int, allocation_bps: float, count: int, timeout: float) -> list[dict]:
    """Wait for ``count`` step reports made under ``allocation_bps``; return their data."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            s.data
            for s in MetricSample.objects.filter(job_id=job_id).order_by("step")
            if s.data.get("allocation_bps") == allocation_bps
        ]
        # Skip the first report under a new allocation: its step straddles the change.
        if len(found) > count:
            return found[1:]
        assert time.monotonic() < deadline, (
            f"only {len(found)} reports at {allocation_bps / MBIT} Mbit/s"
        )
        time.sleep(0.3)


def achieved_bps(reports: list[dict]) -> float:
    """Wire bits sent per second of communication, over a window of steps."""
    return sum(r["bytes_sent"] for r in reports) * 8 / sum(r["comm_time_s"] for r in reports)


def test_a_quota_change_reallocates_and_the_run_obeys_it(live, alice, vision, django_user_model):
    django_user_model.objects.create_superuser("root", password=PASSWORD)
    vision.bandwidth_quota_mbps = 40
    vision.save()
    alice_token, admin_token = live.token("alice", PASSWORD), live.token("root", PASSWORD)
    _, job = live.request(
        "POST",
        "/api/v1/jobs/",
        {
            "tenant": "vision",
            "name": "paced",
            "workload": "tiny_gpt",
            "world_size": 2,
            "steps": 100_000,
        },
        token=alice_token,
    )
    live.wait_for_job(job["id"], alice_token, {"running"}, timeout=120)
    assert Job.objects.get(pk=job["id"]).allocation_mbps == pytest.approx(40)
    before = achieved_bps(samples_at(job["id"], 40 * MBIT, count=10, timeout=120))

    status, _ = live.request(
        "PATCH", "/api/v1/tenants/vision/quota/", {"bandwidth_quota_mbps": 10}, token=admin_token
    )
    assert status == 200
    after = achieved_bps(samples_at(job["id"], 10 * MBIT, count=5, timeout=120))

    live.request("POST", f"/api/v1/jobs/{job['id']}/cancel/", token=alice_token)
    live.wait_for_job(job["id"], alice_token, {"cancelled"}, timeout=60)
    # The throttle paces at the allocation; overlap with backward can only lower the rate.
    assert 0.5 * 40 * MBIT <= before <= 1.1 * 40 * MBIT, before
    assert 0.5 * 10 * MBIT <= after <= 1.1 * 10 * MBIT, after
