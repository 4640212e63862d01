"""Faults injected for real into a live stack: no job is lost or failed by the platform.

kill -9 a rank, kill -9 the Celery worker, SIGSTOP a rank (a hung run), and stopping the
whole stack with jobs admitted, running and being preempted.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db.models import F
from django.test import Client

from controlplane.jobs.models import Job
from controlplane.telemetry.models import Alarm, MetricSample
from tests import faults
from tests.faults import wait_until

from ..conftest import PASSWORD
from .conftest import wait_for_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def submit(live, token: str, **fields) -> dict:
    body = {"tenant": "vision", "workload": "tiny_gpt", "world_size": 2, "sync": "full"}
    status, job = live.request("POST", "/api/v1/jobs/", {**body, **fields}, token=token)
    assert status == 201, job
    return job


def path_of(job_id: int) -> list[str]:
    """The statuses a job went through, in order (notes left out)."""
    events = Job.objects.get(pk=job_id).events.exclude(from_status=F("to_status"))
    return list(events.values_list("to_status", flat=True))


def trained_to(job_id: int, step: int):
    return lambda: (Job.objects.get(pk=job_id).last_step or 0) >= step


def running_pgid(job_id: int, attempt_after: float = 0.0) -> int | None:
    """The pgid of the job's run once it is running (a run newer than ``attempt_after``)."""
    job = Job.objects.get(pk=job_id)
    started = job.events.filter(to_status="running").last()
    if job.status != "running" or started is None or started.created_at.timestamp() < attempt_after:
        return None
    return job.placement.get("pgid")


def cancel(live, token: str, job_id: int) -> None:
    live.request("POST", f"/api/v1/jobs/{job_id}/cancel/", token=token)
    live.wait_for_job(job_id, token, {"cancelled", "succeeded", "failed"}, timeout=90)


def test_a_killed_rank_is_named_restarted_with_backoff_and_fails_past_max_restarts(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(
        live, token, name="rank-kill", steps=100_000, max_restarts=2,
        hyperparameters={"checkpoint_every": 5},
    )  # fmt: skip
    # 1. A rank killed before its first step: the run restarts at once (no 30 s kill wait).
    pgid = wait_until(lambda: running_pgid(job["id"]), 120, "the first run")
    pids = wait_until(lambda: faults.rank_pids(pgid).get(1), 60, "rank 1 to start")
    killed_at = time.time()
    faults.kill_rank(pgid, rank=1)
    wait_until(lambda: Job.objects.get(pk=job["id"]).restarts >= 1, 60, "the first restart")
    restarting = Job.objects.get(pk=job["id"]).events.filter(to_status="restarting").first()
    assert restarting.created_at.timestamp() - killed_at < 20, "a failed start cost too long"
    assert pids and "rank 1 killed by SIGKILL" in restarting.reason, restarting.reason

    # 2. Killed mid-run: named with its last lines, restarted after a longer backoff.
    second = wait_until(lambda: running_pgid(job["id"], killed_at), 120, "the second run")
    wait_until(
        lambda: MetricSample.objects.filter(job_id=job["id"], step__gte=1).exists(),
        120,
        "a step of the second run",
    )
    faults.kill_rank(second, rank=0)  # rank 0 prints progress; rank 1 prints nothing
    wait_until(lambda: Job.objects.get(pk=job["id"]).restarts >= 2, 60, "the second restart")
    events = list(Job.objects.get(pk=job["id"]).events.exclude(from_status=F("to_status")))
    second_restart = [e for e in events if e.to_status == "restarting"][1]
    assert "rank 0 killed by SIGKILL; last lines: " in second_restart.reason
    assert "tiny_gpt: " in second_restart.reason or "step " in second_restart.reason
    rerun = wait_until(
        lambda: next(
            (e for e in Job.objects.get(pk=job["id"]).events.filter(to_status="running")
             if e.created_at > second_restart.created_at), None,
        ),
        120,
        "the third run",
    )  # fmt: skip
    # Backoff before restart 2 is 2 x the base (0.5 s in the live stack).
    assert (rerun.created_at - second_restart.created_at).total_seconds() >= 1.0

    # 3. Past the job's own max_restarts (2), the next failure fails the job, named.
    third = wait_until(lambda: running_pgid(job["id"], rerun.created_at.timestamp()), 60, "run 3")
    wait_until(lambda: faults.rank_pids(third).get(1), 60, "rank 1 of run 3")
    faults.kill_rank(third, rank=1)
    done = live.wait_for_job(job["id"], token, {"failed", "succeeded", "cancelled"}, timeout=90)
    assert done["status"] == "failed" and done["restarts"] == 2
    assert "rank 1 killed by SIGKILL" in done["exit_reason"]


def test_a_killed_worker_s_run_resumes_from_its_checkpoint_on_the_restarted_worker(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(
        live, token, name="worker-kill", steps=100_000, hyperparameters={"checkpoint_every": 5}
    )
    wait_until(trained_to(job["id"], 8), 180, "the job to train past a checkpoint")
    old_worker = faults.kill_worker(live.stack)

    # The stack restarts the worker; the run it left is stopped at a checkpoint and requeued.
    # The next pass may readmit it within one poll of the API, so read the job's history.
    requeued = wait_until(
        lambda: (
            Job.objects.get(pk=job["id"])
            .events.filter(from_status="running", to_status="queued")
            .first()
        ),
        90,
        "the run to be requeued",
    )
    assert "supervisor was lost" in requeued.reason, requeued.reason
    wait_for_worker(timeout=60)
    assert live.stack.get("worker").proc.pid != old_worker
    wait_until(lambda: len(path_of(job["id"])) >= 5, 120, "the run to start again")
    running = live.wait_for_job(job["id"], token, {"running"}, timeout=120)

    resumed = running["resumed_from_step"]
    assert resumed is not None and resumed >= 5
    assert requeued.reason.endswith(f"resumes from step {resumed}"), requeued.reason
    path = path_of(job["id"])
    assert path == ["admitted", "running", "queued", "admitted", "running"], path
    client = Client()
    client.force_login(alice)
    page = client.get(f"/jobs/{job['id']}/").content.decode()
    assert f"step {resumed}</dd>" in page  # "Resumed from" on the job page
    cancel(live, token, job["id"])


def test_sigterm_to_the_worker_alone_checkpoints_and_requeues_its_run_which_resumes(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(live, token, name="drain", steps=100_000, hyperparameters={"checkpoint_every": 50})
    wait_until(trained_to(job["id"], 3), 180, "the job to train")
    worker = live.stack.get("worker").proc
    os.kill(worker.pid, signal.SIGTERM)  # the master only, as `systemctl stop` does

    requeued = live.wait_for_job(job["id"], token, {"queued", "failed"}, timeout=60)
    assert requeued["status"] == "queued", requeued
    assert requeued["status_reason"].startswith("worker shutting down; requeued")
    # Checkpointed where SIGTERM found it, not at the last periodic checkpoint (step 0).
    assert requeued["checkpoint_step"] >= 3
    worker.wait(timeout=60)  # a warm shutdown: it exits once its supervisors are done
    running = live.wait_for_job(job["id"], token, {"running"}, timeout=180)
    assert running["resumed_from_step"] == requeued["checkpoint_step"]
    cancel(live, token, job["id"])


def test_a_hung_run_raises_a_straggler_alarm_and_is_restarted(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(live, token, name="hang", steps=100_000, hyperparameters={"checkpoint_every": 5})
    wait_until(trained_to(job["id"], 3), 180, "the job to train")
    faults.hang_rank(Job.objects.get(pk=job["id"]).placement["pgid"], rank=1)

    # No step for the hang timeout (45 s in the live stack): alarm, then a restart.
    restarted = wait_until(
        lambda: Job.objects.get(pk=job["id"]).events.filter(to_status="restarting").first(),
        150,
        "the hung run to be restarted",
    )
    assert restarted.reason.startswith("hung: no step for")
    alarm = Alarm.objects.get(job_id=job["id"], kind="straggler")
    assert alarm.raised_at <= restarted.created_at
    live.wait_for_job(job["id"], token, {"running"}, timeout=120)
    # The restarted run makes steps again: the alarm is cleared.
    wait_until(
        lambda: Alarm.objects.get(pk=alarm.pk).cleared_at is not None, 120, "the alarm to clear"
    )
    cancel(live, token, job["id"])


def test_stopping_the_stack_requeues_admitted_running_and_preempting_jobs_to_resume(
    live, alice, bob, vision
):
    vision.slot_quota = 2
    vision.save()
    alice_token, bob_token = live.token("alice", PASSWORD), live.token("bob", PASSWORD)
    low = submit(live, alice_token, name="low", priority="low", steps=100_000,
                 hyperparameters={"checkpoint_every": 5})  # fmt: skip
    other = submit(live, bob_token, tenant="speech", name="other", steps=100_000,
                   hyperparameters={"checkpoint_every": 5})  # fmt: skip
    wait_until(trained_to(low["id"], 3), 180, "the low job to train")
    wait_until(trained_to(other["id"], 3), 180, "the other job to train")
    critical = submit(live, alice_token, name="critical", priority="critical", steps=10)
    wait_until(lambda: Job.objects.get(pk=critical["id"]).status == "admitted", 60, "the admission")

    # Ctrl-C: every service stopped, newest first (the worker drains its runs), then started.
    live.stack.stop()
    assert {j.status for j in Job.objects.filter(pk__in=[low["id"], other["id"]])} <= {
        "queued",
        "preempted",
    }
    live.restart()

    done = live.wait_for_job(critical["id"], alice_token, {"succeeded", "failed"}, timeout=240)
    assert done["status"] == "succeeded"
    for job, token in ((other, bob_token), (low, alice_token)):
        running = live.wait_for_job(job["id"], token, {"running"}, timeout=240)
        assert running["resumed_from_step"] is not None and running["resumed_from_step"] >= 3
        assert "failed" not in path_of(job["id"])
        cancel(live, token, job["id"])
