"""Tenant code end to end: bundles uploaded through the API and run by a real worker.

These tests start a stack of their own whose worker runs ranks as an unprivileged user
(SYNCLANE_RUN_AS=nobody, a uid per job), as a production worker running as root should.
That stack is a fresh install of its own, isolated from the suite-wide ``live`` stack: its
own database (migrated and seeded with the demo personas, as ``make up`` does; a SQLite file,
or a database created beside the test database on the same PostgreSQL server) and its own
redis-server (ACL users are per server). So the two stacks' schedulers, workers and
reconcilers never see each other's jobs, and the tests talk to it only as users do: the
API and the websocket. Ranks need an interpreter the unprivileged user can run: where ours
lives under a private folder, a hard-linked copy of it is made (same files, no copying of
bytes) with our packages on its path.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from controlplane import devstack

from ..conftest import PASSWORD
from .conftest import Live, live_stack
from .test_run_lifecycle import SocketListener

pytestmark = pytest.mark.integration

USERCODE = Path(__file__).with_name("usercode")
RUN_AS = "nobody"


def reachable_by_others(path: Path) -> bool:
    """True if a user other than the owner can reach and run ``path`` (o+x all the way)."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


@contextlib.contextmanager
def traversable(*paths: Path) -> Iterator[None]:
    """Let other users pass through (o+x, not list) the folders above ``paths``, then restore.

    A checkout in a private folder (``mktemp -d`` is 0700) hides the project, its packages
    and its run folders from the unprivileged rank user; an operator gives that user the
    same access (docs/operations.md).
    """
    changed: dict[Path, int] = {}
    for path in paths:
        for folder in [path, *path.parents]:
            mode = os.stat(folder).st_mode
            if folder not in changed and not mode & stat.S_IXOTH:
                changed[folder] = stat.S_IMODE(mode)
                os.chmod(folder, stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            os.chmod(folder, mode)


def unprivileged_python(folder: Path) -> dict[str, str]:
    """Settings for an interpreter any user can run, with this environment's packages.

    Returns SYNCLANE_RUN_PYTHON (and LD_LIBRARY_PATH where the interpreter's shared library
    lives beside it: the loader would otherwise fall back to a system libpython).
    """
    ours = Path(os.path.realpath(sys.executable))
    if reachable_by_others(ours):
        return {"SYNCLANE_RUN_PYTHON": sys.executable}
    prefix = folder / "python"
    shutil.copytree(sys.base_prefix, prefix, copy_function=os.link, symlinks=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    (prefix / "lib" / version / "site-packages" / "synclane-test-host.pth").write_text(
        f"import site; site.addsitedir({str(site)!r})\n"
    )
    return {
        "SYNCLANE_RUN_PYTHON": str(prefix / "bin" / version),
        "LD_LIBRARY_PATH": str(prefix / "lib"),
    }


def own_database_url(state_dir: Path) -> str:
    """The URL of the stack's own database: a file in ``state_dir``, or on PostgreSQL a
    database named after the test database (unique per run) on the same server."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{state_dir / 'tenant-code.sqlite3'}"
    user = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{user}@{host}/{db['NAME']}_tenant_code"


@contextlib.contextmanager
def own_database(url: str) -> Iterator[None]:
    """Create the database ``url`` names, empty (dropped first if a killed run left it), and
    drop it when the block ends; migrate and seed it as ``make up`` does."""
    drop, create = _database_ops(url)
    drop()
    create()
    try:
        env = {**os.environ, "DATABASE_URL": url, "SYNCLANE_DEMO_PASSWORD": PASSWORD}
        for command in (["migrate", "--noinput"], ["seed_demo"]):
            subprocess.run(
                [sys.executable, "manage.py", *command],
                env=env,
                cwd=settings.BASE_DIR,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        yield
    finally:
        drop()


def _database_ops(url: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(drop, create) for the database ``url`` names."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))

        def drop_file() -> None:
            for leftover in path.parent.glob(path.name + "*"):  # with -wal, -shm, -journal
                leftover.unlink()

        return drop_file, lambda: None
    import psycopg

    db = settings.DATABASES["default"]
    name = url.rsplit("/", 1)[1]
    server = {
        "host": db["HOST"] or "127.0.0.1",
        "port": db["PORT"] or 5432,
        "user": db["USER"],
        "password": db["PASSWORD"] or None,
        "dbname": "postgres",
        "autocommit": True,
    }

    def run(sql: str) -> None:
        with psycopg.connect(**server) as conn:
            conn.execute(sql)

    # FORCE: a stack process killed by a fault test may still hold a connection.
    return (
        lambda: run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'),
        lambda: run(f'CREATE DATABASE "{name}"'),
    )


@pytest.fixture(scope="module")
def code_live() -> Iterator[Live]:
    if os.geteuid() != 0:
        pytest.skip("ranks run as another user only where the worker is root")
    state_dir = Path(settings.RUN_DIR) / "tenant-code"
    scratch = Path(tempfile.mkdtemp(prefix="synclane-python-"))
    os.chmod(scratch, 0o755)
    jobs_dir = state_dir / "jobs"
    database_url = own_database_url(state_dir)
    try:
        # A fresh install: its job ids start at 1 again, so no folder of an earlier run may
        # be there for them (job-1's checkpoints would be resumed from).
        shutil.rmtree(state_dir, ignore_errors=True)
        state_dir.mkdir(parents=True)
        site = Path(next(p for p in sys.path if p.endswith("site-packages")))
        with (
            devstack.stopping(devstack.Stack(), jobs_dir) as redis_stack,
            own_database(database_url),
            traversable(site, Path(settings.BASE_DIR), state_dir),
        ):
            env = {
                "REDIS_URL": devstack.start_private_redis(
                    redis_stack, state_dir, log=state_dir / "redis.log"
                ),
                "SYNCLANE_RUN_AS": RUN_AS,
                "SYNCLANE_RUN_AS_UIDS": "1000",
                **unprivileged_python(scratch),
                "SYNCLANE_STORAGE_DIR": str(state_dir / "storage"),
                "SYNCLANE_BUNDLE_CACHE_DIR": str(state_dir / "bundle-cache"),
                # Ranks that start as another user import torch cold; on a loaded machine
                # that alone can take the 45 s a test stack gives a run to make its first step.
                "SYNCLANE_HANG_TIMEOUT_S": "150",
            }
            with live_stack(
                jobs_dir=jobs_dir, state_dir=state_dir, database_url=database_url, env=env
            ) as stack:
                yield stack
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def bundle_of(folder: Path) -> bytes:
    """``folder`` packed as a .tar.gz, as a user would upload it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(folder.rglob("*.py")):
            archive.add(path, arcname=str(path.relative_to(folder)))
    return buffer.getvalue()


def upload(live: Live, token: str, folder: str, tenant: str = "vision") -> dict:
    response = httpx.post(
        f"{live.url}/api/v1/bundles/",
        headers={"Authorization": f"Token {token}"},
        data={"tenant": tenant},
        files={"file": (f"{folder}.tar.gz", bundle_of(USERCODE / folder))},
        timeout=30,
    )
    assert response.status_code in (200, 201), response.text
    return response.json()


def submit_code(live: Live, token: str, bundle: dict, entrypoint, **fields) -> dict:
    body = {
        "tenant": "vision",
        "name": "tenant code",
        "world_size": 2,
        "steps": 12,
        "code": bundle["sha256"],
        "entrypoint": entrypoint,
        **fields,
    }
    status, job = live.request("POST", "/api/v1/jobs/", body, token=token)
    assert status == 201, job
    return job


def run_dir(live: Live, job_id: int) -> Path:
    """The job's run folder as the stack's worker has it (its SYNCLANE_JOBS_DIR)."""
    return live.jobs_dir / f"job-{job_id}"


def watch(live: Live, job_id: int, token: str) -> SocketListener:
    """A websocket client of the job's page, signed in with an API token; started."""
    socket = SocketListener(live, job_id, cookie="")
    socket.headers = {"Authorization": f"Token {token}", "Origin": live.url}
    socket.start()
    socket.connected.wait(10)
    return socket


def stored_metrics(live: Live, job_id: int, token: str) -> dict[str, Any]:
    """The job's stored metric series that have points (name -> {x: steps, y: values})."""
    status, body = live.request("GET", f"/api/v1/jobs/{job_id}/metrics/", token=token)
    assert status == 200, body
    return {name: series for name, series in body["metrics"].items() if series["x"]}


def job_of(live: Live, job_id: int, token: str) -> dict[str, Any]:
    status, body = live.request("GET", f"/api/v1/jobs/{job_id}/", token=token)
    assert status == 200, body
    return body


def test_a_bundled_model_of_its_own_runs_on_two_ranks_with_live_metrics(code_live):
    token = code_live.token("alice", PASSWORD)
    bundle = upload(code_live, token, "mlp")
    job = submit_code(code_live, token, bundle, "train.py --width 24")
    listener = watch(code_live, job["id"], token)

    done = code_live.wait_for_job(job["id"], token, {"succeeded", "failed", "cancelled"})
    listener.join(30)

    assert done["status"] == "succeeded", done
    assert (done["bundle_sha256"], done["bundle_file_count"]) == (bundle["sha256"], 2)
    assert done["entrypoint"] == ["train.py", "--width", "24"]
    metrics = [m for m in listener.messages if m["type"] == "metrics"]
    assert metrics and {"loss", "step"} <= set(metrics[-1]["data"])
    assert done["last_step"] == 12
    # Run as the unprivileged user of this job, in the run's own copy of the bundle.
    folder = run_dir(code_live, job["id"])
    whoami = json.loads((folder / "whoami.json").read_text())
    assert whoami["uid"] != 0 and whoami["cwd"] == str(folder / "code")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == whoami["uid"]


def test_a_script_that_never_imports_the_runtime_finishes_with_its_logs(code_live):
    token = code_live.token("alice", PASSWORD)
    bundle = upload(code_live, token, "plain")
    job = submit_code(
        code_live, token, bundle, ["hello.py", "no", "runtime"], env={"GREETING": "1"}
    )

    done = code_live.wait_for_job(job["id"], token, {"succeeded", "failed", "cancelled"})

    assert done["status"] == "succeeded" and done["exit_code"] == 0, done
    for rank in (0, 1):
        status, log = code_live.request(
            "GET", f"/api/v1/jobs/{job['id']}/logs/?rank={rank}", token=token
        )
        assert status == 200 and f"hello from rank {rank}: no runtime" in log["lines"], log
    assert stored_metrics(code_live, job["id"], token) == {}


def wait_for_step(live: Live, job_id: int, token: str, step: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (job_of(live, job_id, token)["last_step"] or 0) < step:
        assert time.monotonic() < deadline, f"job {job_id} did not reach step {step}"
        time.sleep(0.3)


def test_from_inside_a_job_only_its_own_telemetry_and_folder_are_reachable(code_live):
    token = code_live.token("alice", PASSWORD)
    victim = submit_code(
        code_live,
        token,
        upload(code_live, token, "mlp"),
        "train.py --step-sleep 0.2",
        steps=100_000,
    )
    wait_for_step(code_live, victim["id"], token, 2, timeout=120)
    victim_dir = run_dir(code_live, victim["id"])
    probe = submit_code(
        code_live,
        token,
        upload(code_live, token, "probe"),
        ["probe.py", str(victim["id"]), str(victim_dir), *control_plane_files()],
        world_size=1,
    )

    done = code_live.wait_for_job(probe["id"], token, {"succeeded", "failed", "cancelled"})
    code_live.request("POST", f"/api/v1/jobs/{victim['id']}/cancel/", token=token)

    assert done["status"] == "succeeded", done
    results = json.loads((run_dir(code_live, probe["id"]) / "probe.json").read_text())
    allowed = {what: how for what, how in results.items() if str(how).startswith("ALLOWED")}
    assert set(allowed) == {"own allocation"}, results
    assert "NoPermission" in results["other stream"] and "NoPermission" in results["flushall"]
    # The server's all-powerful default user: not without a password (NOAUTH), not with the
    # job's own (WRONGPASS); redis-py raises AuthenticationError for both.
    for how in ("default, no password", "default, own password", "own password, no user"):
        assert results[how].startswith("refused: AuthenticationError: "), (how, results)
    assert "PermissionError" in results["other run folder"], results
    assert results["env"] == []
    # Its own telemetry went through.
    deadline = time.monotonic() + 30
    while not stored_metrics(code_live, probe["id"], token):
        assert time.monotonic() < deadline, "the probe's own metric was not stored"
        time.sleep(0.3)
    code_live.wait_for_job(victim["id"], token, {"cancelled", "failed", "succeeded"}, timeout=60)


def control_plane_files() -> list[str]:
    """The control plane's state folder, and the stack's database file when that is a file
    (SQLite)."""
    paths = [str(settings.RUN_DIR)]
    database = own_database_url(Path(settings.RUN_DIR) / "tenant-code")
    if database.startswith("sqlite:///"):
        paths.append(database.removeprefix("sqlite:///"))
    return paths


def test_bob_cannot_list_or_run_alices_bundle(code_live):
    alice_token, bob_token = (code_live.token(u, PASSWORD) for u in ("alice", "bob"))
    bundle = upload(code_live, alice_token, "plain")
    status, listed = code_live.request("GET", "/api/v1/bundles/", token=bob_token)
    assert status == 200 and listed == []
    body = {"tenant": "speech", "name": "x", "world_size": 1, "steps": 1}
    status, refused = code_live.request(
        "POST",
        "/api/v1/jobs/",
        {**body, "code": bundle["sha256"], "entrypoint": "hello.py"},
        token=bob_token,
    )
    assert status == 400 and "no bundle" in refused["code"][0]
    status, _ = code_live.request(
        "GET", f"/api/v1/bundles/{bundle['id']}/download/", token=bob_token
    )
    assert status == 404


def test_a_bundled_script_preempted_by_a_critical_job_resumes_from_its_checkpoint(code_live):
    admin = code_live.token("admin", PASSWORD)
    status, body = code_live.request(
        "PATCH", "/api/v1/tenants/vision/quota/", {"slot_quota": 2}, token=admin
    )
    assert status == 200, body
    token = code_live.token("alice", PASSWORD)
    low = submit_code(
        code_live,
        token,
        upload(code_live, token, "mlp"),
        "train.py --step-sleep 0.1",
        steps=100_000,
        priority="low",
        hyperparameters={"checkpoint_every": 5},
    )
    wait_for_step(code_live, low["id"], token, 8, timeout=120)

    critical = submit_code(
        code_live, token, upload(code_live, token, "plain"), "hello.py", priority="critical"
    )
    done = code_live.wait_for_job(critical["id"], token, {"succeeded", "failed"}, timeout=180)
    assert done["status"] == "succeeded", done

    code_live.wait_for_job(low["id"], token, {"running"}, timeout=120)
    listener = watch(code_live, low["id"], token)
    status, events = code_live.request("GET", f"/api/v1/jobs/{low['id']}/events/", token=token)
    assert status == 200, events
    moves = [e for e in events if e["from_status"] != e["to_status"]]
    path = [e["to_status"] for e in moves]
    assert path[:6] == ["admitted", "running", "preempted", "queued", "admitted", "running"], path
    checkpoint = job_of(code_live, low["id"], token)["checkpoint_step"]
    assert checkpoint and checkpoint >= 8
    # What the resumed run reported (stamped after it went running again): past the checkpoint.
    resumed_at = dt.datetime.fromisoformat(moves[5]["created_at"]).timestamp()
    deadline = time.monotonic() + 120
    while not (after := steps_since(listener.messages, resumed_at)):
        assert time.monotonic() < deadline, "no metrics from the resumed run"
        time.sleep(0.3)
    assert min(after) > checkpoint, (after, checkpoint)
    code_live.request("POST", f"/api/v1/jobs/{low['id']}/cancel/", token=token)
    code_live.wait_for_job(low["id"], token, {"cancelled", "failed", "succeeded"}, timeout=60)


def steps_since(messages: list[dict[str, Any]], since: float) -> list[int]:
    """Steps of the metrics messages a job page received that the run stamped after ``since``."""
    return [
        m["data"]["step"] for m in messages if m["type"] == "metrics" and m["data"]["ts"] > since
    ]
