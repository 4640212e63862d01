"""Quotas with real workers: preemption with checkpoint and resume; no overshoot under load."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db.models import F

from controlplane.jobs.choices import ACTIVE, TERMINAL
from controlplane.jobs.models import Job, JobEvent
from controlplane.telemetry.models import MetricSample
from tests.faults import wait_until

from ..conftest import PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def submit(live, token: str, **fields) -> dict:
    body = {"tenant": "vision", "workload": "tiny_gpt", "world_size": 2, "sync": "full", **fields}
    status, job = live.request("POST", "/api/v1/jobs/", body, token=token)
    assert status == 201, job
    return job


def test_a_critical_job_preempts_a_low_job_which_resumes_from_its_checkpoint(live, alice, vision):
    vision.slot_quota = 2
    vision.save()
    token = live.token("alice", PASSWORD)
    low = submit(
        live,
        token,
        name="low",
        priority="low",
        steps=100_000,
        hyperparameters={"checkpoint_every": 5},
    )
    wait_until(
        lambda: (Job.objects.get(pk=low["id"]).last_step or 0) >= 12, 120, "the low job to train"
    )

    critical = submit(live, token, name="critical", priority="critical", steps=10)
    done = live.wait_for_job(critical["id"], token, {"succeeded", "failed"}, timeout=180)
    assert done["status"] == "succeeded"

    # The low job was stopped to make room; once the critical job is done it is readmitted.
    live.wait_for_job(low["id"], token, {"running"}, timeout=120)
    low_job = Job.objects.get(pk=low["id"])
    checkpoint = low_job.checkpoint_step
    # The workload checkpoints where SIGTERM found it, not only every 5 steps.
    assert checkpoint and checkpoint >= 12
    path = list(
        low_job.events.exclude(from_status=F("to_status")).values_list("to_status", flat=True)
    )
    assert path[:6] == ["admitted", "running", "preempted", "queued", "admitted", "running"], path

    # Resumed, not restarted: after the second start the run reports steps past the checkpoint only.
    resumed_at = low_job.events.filter(to_status="running").last().created_at
    wait_until(
        lambda: MetricSample.objects.filter(job_id=low["id"], reported_at__gt=resumed_at).exists(),
        120,
        "metrics from the resumed run",
    )
    after = MetricSample.objects.filter(job_id=low["id"], reported_at__gt=resumed_at)
    assert min(after.values_list("step", flat=True)) > checkpoint
    assert Job.objects.get(pk=low["id"]).placement["resumed_from"] == checkpoint

    live.request("POST", f"/api/v1/jobs/{low['id']}/cancel/", token=token)
    assert live.wait_for_job(low["id"], token, {"cancelled"}, timeout=60)["status"] == "cancelled"


def max_concurrent_slots(jobs: list[Job]) -> int:
    """Largest number of slots held at once, from each job's admitted..ended events."""
    edges: list[tuple[dt.datetime, int]] = []
    for job in jobs:
        held_since = None
        for event in JobEvent.objects.filter(job=job).order_by("created_at", "id"):
            if event.to_status == event.from_status:
                continue
            if event.to_status in ACTIVE and held_since is None:
                held_since = event.created_at
                edges.append((held_since, job.world_size))
            elif event.to_status not in ACTIVE and held_since is not None:
                edges.append((event.created_at, -job.world_size))
                held_since = None
    level = peak = 0
    # At equal times, releases before acquisitions.
    for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):
        level += delta
        peak = max(peak, level)
    return peak


def test_concurrent_submissions_never_overshoot_the_quota(live, alice, vision):
    vision.slot_quota = 2
    vision.save()
    token = live.token("alice", PASSWORD)
    ids: list[int] = []

    def one(i: int) -> None:
        ids.append(submit(live, token, name=f"burst-{i}", world_size=1, steps=3)["id"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 8

    for job_id in ids:
        live.wait_for_job(job_id, token, set(TERMINAL), timeout=240)
    jobs = list(Job.objects.filter(pk__in=ids))
    assert {j.status for j in jobs} == {"succeeded"}
    assert max_concurrent_slots(jobs) == 2
