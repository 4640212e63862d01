"""A launch that meets a platform fault puts its job back in the queue; the job's own fault fails it.

Faults are real: a Redis port nobody listens on, a control plane address nobody listens
on, and a small HTTP server answering 503 or 404 for the bundle.
"""

from __future__ import annotations

import datetime as dt
import http.server
import threading
from collections.abc import Iterator

import pytest
from django.utils import timezone

from controlplane import devstack
from controlplane.jobs.models import Job, Node
from controlplane.jobs.scheduler import schedule_pass
from workers.supervisor import lease as leases
from workers.supervisor import run

pytestmark = pytest.mark.django_db(transaction=True)

BUNDLE = "ab" * 32


def dead_url(scheme: str) -> str:
    """An address on this machine where nothing listens (connections are refused)."""
    return f"{scheme}://127.0.0.1:{devstack.free_port()}"


@pytest.fixture
def control_plane_answering(settings) -> Iterator[callable]:
    """Point the workers' control plane URL at an HTTP server that answers ``status``."""
    servers = []

    def start(status: int) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                self.send_error(status)

            def log_message(self, *args) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        settings.SYNCLANE_CONTROL_URL = f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def code_job(make_job, settings, tmp_path):
    settings.SYNCLANE_BUNDLE_CACHE_DIR = tmp_path / "bundle-cache"
    return make_job("admitted", bundle_sha256=BUNDLE, entrypoint=["train.py"])


def test_a_job_whose_redis_user_cannot_be_created_goes_back_to_the_queue(
    lease_redis, make_job, settings
):
    job = make_job("admitted")
    lease = leases.acquire(job.pk)
    settings.REDIS_URL = dead_url("redis") + "/0"  # Redis went away after the lease was taken
    outcome = run._launch(job, run.Supervision(lease=lease, drain=threading.Event()))
    job.refresh_from_db()
    assert outcome is not None and outcome.status == "queued"
    assert job.status == "queued"
    assert "Redis user" in job.status_reason and "back to the queue" in job.status_reason


def test_a_job_whose_code_cannot_be_fetched_from_an_unreachable_control_plane_is_requeued(
    lease_redis, code_job, settings
):
    settings.SYNCLANE_CONTROL_URL = dead_url("http")
    outcome = run.supervise(code_job.pk)
    code_job.refresh_from_db()
    assert outcome is not None and outcome.status == "queued"
    assert code_job.status == "queued" and "back to the queue" in code_job.status_reason


def test_a_job_whose_code_fetch_meets_a_server_error_is_requeued(
    lease_redis, code_job, control_plane_answering
):
    control_plane_answering(503)
    outcome = run.supervise(code_job.pk)
    code_job.refresh_from_db()
    assert outcome is not None and outcome.status == "queued"
    assert code_job.status == "queued" and "said 503" in code_job.status_reason


def test_a_job_whose_bundle_is_refused_fails(lease_redis, code_job, control_plane_answering):
    control_plane_answering(404)
    outcome = run.supervise(code_job.pk)
    code_job.refresh_from_db()
    assert outcome is not None and outcome.status == "failed"
    assert code_job.status == "failed" and "said 404" in code_job.status_reason
    assert Job.objects.get(pk=code_job.pk).exit_reason.startswith("could not prepare the run")


def test_a_requeued_launch_is_held_back_by_the_next_passes_for_its_back_off(
    lease_redis, code_job, settings
):
    # The pass below admits the job and sends its launch after commit. The suite's live worker
    # must not take that launch and race this test's own supervise(): the job may only run on
    # a node of this test, whose queue no worker consumes.
    Node.objects.create(
        name="held-back-test",
        slots=4,
        fabric_mbps=1000,
        last_seen=timezone.now(),
        labels={"test": "held-back"},
    )
    Job.objects.filter(pk=code_job.pk).update(node_selector={"test": "held-back"})
    settings.SYNCLANE_LAUNCH_BACKOFF_S, settings.SYNCLANE_LAUNCH_BACKOFF_MAX_S = 30, 600
    settings.SYNCLANE_CONTROL_URL = dead_url("http")
    run.supervise(code_job.pk)
    code_job.refresh_from_db()
    assert (code_job.status, code_job.launch_faults) == ("queued", 1)
    assert "retried in 30 s at the earliest" in code_job.status_reason

    assert schedule_pass().admitted == []  # before the back-off, the pass would readmit it
    code_job.refresh_from_db()
    assert code_job.status == "queued" and code_job.wait_code == "backoff"
    assert "launch failed once in a row (platform fault)" in code_job.status_reason

    # Its back-off over, it is admitted; a second fault in a row doubles the wait.
    Job.objects.filter(pk=code_job.pk).update(launch_fault_at=timezone.now() - dt.timedelta(60))
    assert schedule_pass().admitted == [code_job.pk]
    code_job.refresh_from_db()
    assert [part["node"] for part in code_job.placement["nodes"]] == ["held-back-test"]
    run.supervise(code_job.pk)
    code_job.refresh_from_db()
    assert (code_job.status, code_job.launch_faults) == ("queued", 2)
    assert "retried in 60 s at the earliest" in code_job.status_reason


def test_the_back_off_is_bounded_by_its_cap(lease_redis, code_job, settings):
    settings.SYNCLANE_LAUNCH_BACKOFF_S, settings.SYNCLANE_LAUNCH_BACKOFF_MAX_S = 2, 45
    Job.objects.filter(pk=code_job.pk).update(launch_faults=30)  # a fault that lasted
    settings.SYNCLANE_CONTROL_URL = dead_url("http")
    run.supervise(code_job.pk)
    code_job.refresh_from_db()
    assert code_job.launch_faults == 31
    assert "retried in 45 s at the earliest" in code_job.status_reason


def test_a_launch_that_starts_its_run_clears_the_count(lease_redis, make_job):
    job = make_job("admitted", workload="noop", world_size=1, steps=1, launch_faults=4)
    outcome = run.supervise(job.pk)
    job.refresh_from_db()
    assert outcome is not None and outcome.status == "succeeded", outcome
    assert job.launch_faults == 0
