"""``synclane watch`` and ``synclane logs -f`` survive their server being killed (-9) and
restarted mid-run: the watch backfills, the log follow prints every line once."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from controlplane import devstack
from controlplane.jobs.models import Job
from tests.faults import wait_until

from ..conftest import PASSWORD
from .conftest import _database_url
from .test_cli import SYNCLANE

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def start_asgi(port: int, env: dict[str, str], log) -> subprocess.Popen:
    proc = subprocess.Popen(
        devstack.asgi_argv(port), env=env, cwd=devstack.BASE_DIR, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    devstack.wait_for_port(port, timeout=60, proc=proc)
    return proc


def trained_past(job_id: int, step: int):
    return lambda: (Job.objects.get(pk=job_id).last_step or 0) > step


def test_watch_and_log_follow_ride_out_a_killed_server(live, alice, tmp_path):
    env = {**os.environ, "DATABASE_URL": _database_url(), "SYNCLANE_JOBS_DIR": str(live.jobs_dir)}
    port = devstack.free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "asgi.log", "ab")  # noqa: SIM115 - closed below
    server = start_asgi(port, env, log)
    cli_env = {**env, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    watcher = follower = None
    try:
        subprocess.run(
            [SYNCLANE, "login", url, "-u", "alice", "--password", PASSWORD],
            env=cli_env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        token = live.token("alice", PASSWORD)
        job_id = live.request(
            "POST", "/api/v1/jobs/",
            {"tenant": "vision", "name": "long", "workload": "tiny_gpt", "world_size": 2,
             "steps": 5000, "sync": "full"},
            token=token,
        )[1]["id"]  # fmt: skip

        def rank0_log() -> list[str]:  # through the stack's own server, up all along
            path = f"/api/v1/jobs/{job_id}/logs/?lines=1000"
            return live.request("GET", path, token=token)[1]["lines"]

        watcher = subprocess.Popen(
            [SYNCLANE, "watch", str(job_id)], env=cli_env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_until(trained_past(job_id, 5), 120, "the job to train")
        followed_file = tmp_path / "followed.txt"
        follower = subprocess.Popen(
            [SYNCLANE, "logs", str(job_id), "-f", "--lines", "1000", "--interval", "0.3"],
            env=cli_env, stdout=followed_file.open("w"), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_until(lambda: followed_file.read_text().strip(), 60, "the follow to print")

        lines_at_kill = len(rank0_log())
        step_at_kill = Job.objects.get(pk=job_id).last_step or 0
        os.killpg(server.pid, signal.SIGKILL)  # the watch loses its socket mid-run
        server.wait()
        time.sleep(2)
        server = start_asgi(port, env, log)
        step_before_cancel = Job.objects.get(pk=job_id).last_step or 0
        time.sleep(3)  # the watch reconnects (backoff 0.5 s, 1 s, 2 s, …)
        # rank 0 prints every 10 steps: lines the follow can only read after the restart
        wait_until(trained_past(job_id, step_at_kill + 20), 120, "steps after the restart")
        live.request("POST", f"/api/v1/jobs/{job_id}/cancel/", token=token)
        out, err = watcher.communicate(timeout=120)
        follow_err = follower.communicate(timeout=120)[1]
        followed = followed_file.read_text()
        logged = rank0_log()
    finally:
        for proc in (watcher, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
    assert watcher.returncode == 1, (out, err)
    assert "connection lost; reconnecting in" in out
    final = out.strip().splitlines()[-1]
    assert final.startswith(f"job {job_id} cancelled at step ")
    shown_step = int(final.split(" at step ")[1].split("/")[0])
    assert shown_step >= step_before_cancel > 5
    # The follow printed rank 0's log as the file holds it: nothing missed while the server
    # was down, nothing twice (lines written after the job ended may be left out).
    assert follower.returncode == 0, (followed, follow_err)
    followed_lines = followed.splitlines()
    assert len(logged) < 1000 and len(followed_lines) > lines_at_kill, (followed, logged)
    assert followed_lines == logged[: len(followed_lines)]
