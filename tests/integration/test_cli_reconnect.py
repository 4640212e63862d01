"""``synclane watch`` survives its server being killed (-9) and restarted mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from controlplane import devstack
from controlplane.jobs.models import Job

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


def wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_watch_reconnects_after_the_server_is_killed_and_backfills(live, alice, tmp_path):
    env = {**os.environ, "DATABASE_URL": _database_url(), "SYNCLANE_JOBS_DIR": str(live.jobs_dir)}
    port = devstack.free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "asgi.log", "ab")  # noqa: SIM115 - closed below
    server = start_asgi(port, env, log)
    cli_env = {**env, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    watcher = None
    try:
        subprocess.run(
            [SYNCLANE, "login", url, "-u", "alice", "--password", PASSWORD],
            env=cli_env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        job_id = live.request(
            "POST", "/api/v1/jobs/",
            {"tenant": "vision", "name": "long", "workload": "tiny_gpt", "world_size": 2,
             "steps": 5000, "sync": "full"},
            token=live.token("alice", PASSWORD),
        )[1]["id"]  # fmt: skip
        watcher = subprocess.Popen(
            [SYNCLANE, "watch", str(job_id)], env=cli_env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_for(lambda: (Job.objects.get(pk=job_id).last_step or 0) > 5, timeout=120)

        os.killpg(server.pid, signal.SIGKILL)  # the watch loses its socket mid-run
        server.wait()
        time.sleep(2)
        server = start_asgi(port, env, log)
        step_before_cancel = Job.objects.get(pk=job_id).last_step or 0
        time.sleep(3)  # the watch reconnects (backoff 0.5 s, 1 s, 2 s, …)
        live.request("POST", f"/api/v1/jobs/{job_id}/cancel/", token=live.token("alice", PASSWORD))
        out, err = watcher.communicate(timeout=120)
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
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
