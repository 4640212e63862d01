"""Each reconcile case on its own: every non-terminal job whose driver vanished is settled."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest

from controlplane.jobs.models import Job
from workers.supervisor import lease as leases
from workers.supervisor import process, reconcile

from .conftest import ago

pytestmark = pytest.mark.django_db(transaction=True)

# Stands in for a torchrun whose supervisor died: on SIGTERM it writes a checkpoint of the
# step it reached, like the workloads do, and exits.
ORPHAN = textwrap.dedent(
    """
    import hashlib, pathlib, signal, sys, time
    run_dir = pathlib.Path(sys.argv[1].removeprefix("--run-dir="))
    def stop(*_):
        state = run_dir / "ckpt-00000012.pt"
        state.write_bytes(b"state")
        digest = hashlib.sha256(b"state").hexdigest()
        (run_dir / "ckpt-00000012.pt.sha256").write_text(f"{digest}  {state.name}\\n")
        sys.exit(75)
    signal.signal(signal.SIGTERM, stop)
    (run_dir / "ready").write_text("1")
    while True:
        time.sleep(0.05)
    """
)


def test_an_admitted_job_with_no_live_launch_goes_back_to_the_queue(lease_redis, make_job):
    job = make_job("admitted", admitted_at=ago(60))
    assert reconcile.admitted_without_launch() == 1
    job.refresh_from_db()
    assert job.status == "queued" and "no live launch" in job.status_reason


def test_an_admitted_job_whose_launch_holds_the_lease_is_left_alone(lease_redis, make_job):
    job = make_job("admitted", admitted_at=ago(60))
    assert leases.acquire(job.pk) is not None
    assert reconcile.admitted_without_launch() == 0
    assert Job.objects.get(pk=job.pk).status == "admitted"


def test_a_just_admitted_job_is_given_time_to_launch(lease_redis, make_job):
    job = make_job("admitted", admitted_at=ago(1))
    assert reconcile.admitted_without_launch() == 0
    assert Job.objects.get(pk=job.pk).status == "admitted"


def test_a_run_with_a_stale_lease_is_stopped_at_a_checkpoint_and_requeued(
    lease_redis, make_job, tmp_path
):
    job = make_job("running", heartbeat_at=ago(60), started_at=ago(120))
    job.run_dir.mkdir(parents=True)
    orphan = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, f"--run-dir={job.run_dir}"], start_new_session=True
    )
    _wait_for(lambda: (job.run_dir / "ready").exists())
    Job.objects.filter(pk=job.pk).update(
        placement={"node": socket.gethostname(), "pgid": orphan.pid}
    )

    assert reconcile.runs_with_stale_lease() == 1

    job.refresh_from_db()
    assert job.status == "queued"
    assert job.checkpoint_step == 12 and "resumes from step 12" in job.status_reason
    assert orphan.wait(timeout=5) == 75  # stopped by SIGTERM, not killed
    assert job.restarts == 0 and job.exit_reason == ""  # not counted as a failure


def test_restarting_with_a_stale_lease_and_no_process_is_requeued(lease_redis, make_job):
    job = make_job("restarting", heartbeat_at=ago(60), started_at=ago(120))
    assert reconcile.runs_with_stale_lease() == 1
    assert Job.objects.get(pk=job.pk).status == "queued"


def test_a_run_whose_supervisor_still_beats_is_left_alone(lease_redis, make_job):
    job = make_job("running", heartbeat_at=ago(0), started_at=ago(120))
    assert reconcile.runs_with_stale_lease() == 0
    assert Job.objects.get(pk=job.pk).status == "running"


def test_a_run_whose_lease_is_held_is_left_alone_even_without_heartbeat(lease_redis, make_job):
    job = make_job("running", heartbeat_at=ago(60), started_at=ago(120))
    leases.acquire(job.pk)
    assert reconcile.runs_with_stale_lease() == 0
    assert Job.objects.get(pk=job.pk).status == "running"


def test_a_preempted_job_that_nobody_requeued_is_requeued(lease_redis, make_job):
    job = make_job("preempted", checkpoint_step=40)
    assert reconcile.preempted_without_requeue() == 1
    job.refresh_from_db()
    assert job.status == "queued" and "resumes from step 40" in job.status_reason


def test_a_preemption_request_left_on_a_job_that_is_gone_is_cleared(lease_redis, make_job):
    gone = make_job("succeeded", preempt_requested=True)
    requeued = make_job("queued", preempt_requested=True)
    victim = make_job("running", preempt_requested=True, heartbeat_at=ago(0))
    assert reconcile.preemptions_of_gone_victims() == 2
    assert not Job.objects.get(pk=gone.pk).preempt_requested
    assert not Job.objects.get(pk=requeued.pk).preempt_requested
    assert Job.objects.get(pk=victim.pk).preempt_requested  # its supervisor still acts on it


def test_a_reused_pid_is_never_signalled(lease_redis, make_job):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    job = make_job("running", heartbeat_at=ago(60), started_at=ago(120))
    Job.objects.filter(pk=job.pk).update(
        placement={"node": socket.gethostname(), "pgid": bystander.pid}
    )
    try:
        assert reconcile.runs_with_stale_lease() == 1
        assert process.pid_alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def _wait_for(predicate, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
