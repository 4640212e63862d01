"""The live stack for integration tests: real Celery beat, worker, ingest and ASGI server.

They run as separate processes against the test database and the private Redis
that `make test` started (REDIS_URL). Tests that use them need committed data:
mark them ``django_db(transaction=True)``. A thread supervises the stack as `make up`
does: a service that exits (or is killed by a fault test) is started again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from controlplane import devstack


@dataclass
class Live:
    url: str
    port: int
    jobs_dir: Path
    stack: devstack.Stack
    # Start the stack's services again after ``stack.stop()`` (what a second `make up` does).
    restart: Callable[[], None]

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        """Call the live server's API; return (status, decoded JSON body)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Token {token}")
        try:
            with urllib.request.urlopen(req, timeout=15) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def token(self, username: str, password: str) -> str:
        status, body = self.request(
            "POST", "/api/v1/auth/token/", {"username": username, "password": password}
        )
        assert status == 200, body
        return str(body["token"])

    def wait_for_job(
        self, job_id: int, token: str, statuses: set[str], timeout: float = 180
    ) -> dict[str, Any]:
        """Poll the API until the job reaches one of ``statuses``; return it."""
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            _, body = self.request("GET", f"/api/v1/jobs/{job_id}/", token=token)
            if body.get("status") in statuses:
                return body
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} still {body.get('status')} after {timeout} s: {body}")


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def wait_for_worker(timeout: float) -> None:
    """Return once a Celery worker answers a ping; raise RuntimeError after ``timeout``."""
    from workers.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError("the Celery worker did not answer")


def _supervise(stack: devstack.Stack, stop: threading.Event) -> None:
    """Restart services that exit, as `make up` does (fault tests kill them)."""
    while not stop.wait(0.3):
        stack.check()


@contextlib.contextmanager
def live_stack(
    *,
    jobs_dir: Path,
    state_dir: Path,
    database_url: str,
    env: Mapping[str, str] | None = None,
    nodes: int = 1,
) -> Iterator[Live]:
    """Start beat, worker, ingest and ASGI server, supervised; yield the Live handle.

    ``env`` is added to the services' environment (a module may start a stack of its own
    with other settings, on a Redis and a database of its own: test_tenant_code.py);
    ``state_dir`` holds the beat's schedule and the logs; ``nodes`` > 1 starts one worker per node (``devstack.LocalNode``).
    Everything, runs included, is stopped when the block ends.
    """
    port = devstack.free_port()
    full_env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SYNCLANE_JOBS_DIR": str(jobs_dir),
        "SYNCLANE_HEARTBEAT_S": "0.5",
        # Every test logs in from 127.0.0.1: the login rate limits are tested on their own.
        "SYNCLANE_LOGIN_RATE_PER_IP": "10000/minute",
        "SYNCLANE_LOGIN_RATE_PER_USER": "10000/minute",
        "SYNCLANE_CANCEL_GRACE_S": "5",
        "SYNCLANE_SAMPLE_INTERVAL_S": "0",
        # Supervision on a test's time scale: a lost worker's runs are taken over within
        # seconds, a hung run is restarted after a minute (startup on a loaded machine
        # takes well under that), restarts back off from half a second.
        "SYNCLANE_LEASE_TTL_S": "5",
        "SYNCLANE_LAUNCH_TIMEOUT_S": "20",
        "SYNCLANE_HANG_TIMEOUT_S": "45",
        "SYNCLANE_RESTART_BACKOFF_S": "0.5",
        # Workers download tenant bundles from this very server.
        "SYNCLANE_CONTROL_URL": f"http://127.0.0.1:{port}",
        **(env or {}),
    }
    stack = devstack.Stack()
    stop_supervising = threading.Event()
    redis_url = full_env["REDIS_URL"]

    def start() -> None:
        devstack.start_services(
            stack, full_env, state_dir, port=port, log_dir=state_dir / "test-stack", nodes=nodes
        )
        devstack.wait_for_port(port, timeout=60, proc=stack.get("asgi").proc)
        if redis_url == settings.REDIS_URL:  # another Redis: our Celery app cannot ping it
            wait_for_worker(timeout=60)

    with devstack.stopping(stack, jobs_dir):
        start()
        supervisor = threading.Thread(target=_supervise, args=(stack, stop_supervising))
        supervisor.start()
        try:
            yield Live(
                url=f"http://127.0.0.1:{port}",
                port=port,
                jobs_dir=jobs_dir,
                stack=stack,
                restart=start,
            )
        finally:
            stop_supervising.set()
            supervisor.join()


@contextlib.contextmanager
def stopped(live: Live, names: tuple[str, ...] = ("beat", "worker")) -> Iterator[None]:
    """Stop the suite-wide stack's beat and worker for good while another stack runs.

    Both stacks share the test database: the other stack's scheduler would otherwise admit
    this stack's jobs. A clean stop (SIGTERM, waited for), not SIGSTOP: a process stopped
    in the middle of a write would hold SQLite's lock for the whole block (the workers'
    node heartbeats write every few seconds). They are started again afterwards.
    """
    services = [live.stack.get(name) for name in names]
    for service in services:
        service.restart = False
        if service.proc is not None and service.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(service.proc.pid, signal.SIGTERM)
            service.proc.wait(timeout=service.stop_grace_s + 30)
    try:
        yield
    finally:
        for service in services:
            service.restart = True
            service.spawn()


# Package scope: the stack runs only while this package's tests run. Its beat ticks the
# scheduler and reconcile on the shared test database, so a test elsewhere that drives those
# steps itself would race it (pytest-django runs every transactional test together, after
# this package's). A later test of this package starts it again.
@pytest.fixture(scope="package")
def live(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Live]:
    with django_db_blocker.unblock():
        database_url = _database_url()
    with live_stack(
        jobs_dir=tmp_path_factory.mktemp("jobs"),
        state_dir=Path(settings.RUN_DIR),
        database_url=database_url,
    ) as stack:
        yield stack
    # The stack wrote until it stopped, after the last test's flush (a beat tick's pass, a
    # node heartbeat): empty the database again, as that flush does, so that the tests run
    # next start from nothing.
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)
