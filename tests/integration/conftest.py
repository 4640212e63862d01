"""The live stack for integration tests: real Celery worker, ingest and ASGI server.

They run as separate processes against the test database and the private Redis
that `make test` started (REDIS_URL). Tests that use them need committed data:
mark them ``django_db(transaction=True)``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from controlplane import devstack


@dataclass
class Live:
    url: str
    port: int
    jobs_dir: Path

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


def _wait_for_worker(timeout: float) -> None:
    from workers.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError("the Celery worker did not answer")


@pytest.fixture(scope="session")
def live(django_db_setup, django_db_blocker, tmp_path_factory) -> Live:
    jobs_dir = tmp_path_factory.mktemp("jobs")
    log_dir = Path(settings.RUN_DIR)
    with django_db_blocker.unblock():
        database_url = _database_url()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SYNCLANE_JOBS_DIR": str(jobs_dir),
        "SYNCLANE_HEARTBEAT_S": "0.5",
        "SYNCLANE_CANCEL_GRACE_S": "5",
        "SYNCLANE_SAMPLE_INTERVAL_S": "0",
    }
    port = devstack.free_port()
    stack = devstack.Stack()
    with devstack.stopping(stack, jobs_dir):
        stack.start(
            "worker", devstack.worker_argv(4, log_dir), env=env, log=log_dir / "test-worker.log"
        )
        stack.start("ingest", devstack.ingest_argv(), env=env, log=log_dir / "test-ingest.log")
        asgi = stack.start("asgi", devstack.asgi_argv(port), env=env, log=log_dir / "test-asgi.log")
        devstack.wait_for_port(port, timeout=60, proc=asgi)
        _wait_for_worker(timeout=60)
        yield Live(url=f"http://127.0.0.1:{port}", port=port, jobs_dir=jobs_dir)
