"""Inject the faults the platform must survive, for real (signals to real processes).

Used by the fault tests (tests/integration/test_supervision.py, test_faults.py) and the
fault benchmark (tests/benchmarks/bench_faults.py):

    kill_worker(stack)            # kill -9 the Celery worker (master and pool processes)
    kill_node(stack, "worker-n2") # kill -9 a node: its worker and every run it started
    kill_rank(pgid, rank=1)       # kill -9 one rank of a run
    hang_rank(pgid, rank=1)       # SIGSTOP one rank: the run makes no more steps
    rank_pids(pgid)               # {rank: pid} of a run's live ranks

    server = RedisServer.start(workdir)   # a private redis-server on a free port
    server.kill(); server.restart()       # kill -9, then an empty one on the same port
    faults = FaultStack.start(workdir)    # a whole stack on its own Redis and database
    faults.kill("asgi")                   # kill -9 a service; its restarter brings it back
    listener = ReconnectingListener(faults, job_id, faults.session_cookie())

``pgid`` is a run's torchrun process group, as the job's ``placement["pgid"]`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import websockets

from controlplane import devstack
from controlplane.devstack import Stack
from controlplane.lib.secret_key import ensure_key_file
from workers.supervisor.process import cmdline, descendants, pid_alive

WORKLOAD_MARK = "workers.workloads."


def kill_worker(stack: Stack) -> int:
    """SIGKILL the stack's Celery worker and its pool processes; return the master's pid.

    The runs it supervised keep training (torchrun has a session of its own) until a
    restarted worker takes them over. The stack restarts the worker (``Stack.check``).
    """
    proc = stack.get("worker").proc
    assert proc is not None and proc.poll() is None, "the worker is not running"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc.pid


def kill_node(stack: Stack, service: str) -> list[int]:
    """SIGKILL a node of a stack with several (``devstack.LocalNode``): the host is lost.

    Its worker, the worker's pool processes, the torchruns they started (sessions of their
    own) and their ranks all die at once, and the stack does not start the worker again
    (``revive_node`` does). Returns the pids killed.
    """
    svc = stack.get(service)
    proc = svc.proc
    assert proc is not None and proc.poll() is None, f"{service} is not running"
    svc.restart = False
    pids = [proc.pid, *descendants(proc.pid)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGSTOP)  # nothing of it acts while the rest is killed
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return pids


def revive_node(stack: Stack, service: str) -> None:
    """Start a node killed by ``kill_node`` again, restarted on exit from then on."""
    svc = stack.get(service)
    svc.restart = True
    svc.spawn()


def rank_pids(pgid: int) -> dict[int, int]:
    """Rank -> pid of every live rank below torchrun ``pgid`` (RANK from its environment)."""
    found: dict[int, int] = {}
    for pid in descendants(pgid):
        if WORKLOAD_MARK not in cmdline(pid) or not pid_alive(pid):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = pid
    return found


def kill_rank(pgid: int, *, rank: int) -> int:
    """SIGKILL one rank of the run; return its pid."""
    pid = rank_pids(pgid)[rank]
    os.kill(pid, signal.SIGKILL)
    return pid


def hang_rank(pgid: int, *, rank: int) -> int:
    """SIGSTOP one rank: its peers block in the next collective; return its pid."""
    pid = rank_pids(pgid)[rank]
    os.kill(pid, signal.SIGSTOP)
    return pid


# --- Redis, killed and restarted ---------------------------------------------------------

T = TypeVar("T")


@dataclass
class RedisServer:
    """A private redis-server whose ``default`` user needs ``password``, as devstack's has."""

    port: int
    data_dir: Path
    password: str
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, workdir: Path, *, port: int | None = None) -> RedisServer:
        """Start a redis-server on ``port`` (a free one by default); return once it listens."""
        port = port or devstack.free_port()
        data_dir = workdir / f"redis-{port}"
        password = devstack.new_redis_password()
        proc = _spawn(port, data_dir, password)
        return cls(port=port, data_dir=data_dir, password=password, proc=proc)

    @property
    def url(self) -> str:
        """The server as its ``default`` user (the same across restarts)."""
        return devstack.private_redis_url(self.port, self.password)

    def kill(self) -> None:
        """kill -9 the server and wait until it is gone."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Start a fresh server on the same port and password (the old one must be dead)."""
        self.proc = _spawn(self.port, self.data_dir, self.password)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _spawn(port: int, data_dir: Path, password: str) -> subprocess.Popen[bytes]:
    argv = devstack.redis_server_argv(port, data_dir, password=password)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, start_new_session=True)
    # The port of a just-killed server can take a moment to be free again.
    devstack.wait_for_port(port, timeout=15, proc=proc)
    return proc


def wait_until(check: Callable[[], T], timeout: float, what: str, *, interval: float = 0.1) -> T:
    """Return ``check()``'s first truthy result; AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- a whole stack whose processes can be killed ------------------------------------------


@dataclass
class FaultStack:
    """Beat, Celery worker, ingest and ASGI server on a Redis and a database of their own.

    Separate from the suite's live stack on purpose: its Redis is killed and restarted,
    and no other worker may admit or launch its jobs. Its services are started and
    restarted by the devstack (``start_services``, ``Stack.check`` in a thread), as
    ``make up`` runs them. The caller talks to it as a user would: the REST API
    (``call``) and websockets (``session_cookie``).
    """

    workdir: Path
    redis: RedisServer
    env: dict[str, str]
    port: int
    stack: Stack = field(default_factory=Stack)
    halt: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, workdir: Path, *, nodes: int = 1, **settings: str) -> FaultStack:
        """Start everything on a fresh SQLite database with the demo users; return once up.

        ``settings`` are extra environment variables (e.g. SYNCLANE_CHECKPOINT_EVERY="10");
        ``nodes`` > 1 starts one worker per node (``devstack.LocalNode``).
        """
        workdir.mkdir(parents=True, exist_ok=True)
        ensure_key_file(workdir)  # its settings read SYNCLANE_RUN_DIR/secret_key, as `make up`'s
        redis = RedisServer.start(workdir)
        env = {
            **os.environ,
            "REDIS_URL": redis.url,
            "DATABASE_URL": f"sqlite:///{workdir / 'faults.sqlite3'}",
            "SYNCLANE_RUN_DIR": str(workdir),
            "SYNCLANE_JOBS_DIR": str(workdir / "jobs"),
            "SYNCLANE_HEARTBEAT_S": "0.5",
            "SYNCLANE_SAMPLE_INTERVAL_S": "0",
            # Supervision on a test's time scale, as the suite's live stack has it.
            "SYNCLANE_LEASE_TTL_S": "5",
            "SYNCLANE_LAUNCH_TIMEOUT_S": "20",
            "SYNCLANE_RESTART_BACKOFF_S": "0.5",
            **settings,
        }
        env.pop(devstack.PRIVATE_REDIS_FLAG, None)
        for command in (["migrate", "--noinput", "-v0"], ["seed_demo"]):
            subprocess.run(
                [devstack.PYTHON, "manage.py", *command],
                env=env,
                cwd=devstack.BASE_DIR,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        faults = cls(workdir=workdir, redis=redis, env=env, port=devstack.free_port())
        try:
            devstack.start_services(
                faults.stack, env, workdir, port=faults.port, log_dir=workdir / "logs", nodes=nodes
            )
            threading.Thread(target=faults._supervise, name="restarter", daemon=True).start()
            faults.wait_for_asgi()
            wait_until(faults.worker_answers, timeout=90, interval=0.5, what="the Celery worker")
        except BaseException:
            faults.stop()
            raise
        return faults

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _supervise(self) -> None:
        """Restart services that exit, as `make up` does."""
        while not self.halt.wait(0.3):
            self.stack.check()

    def wait_for_asgi(self, timeout: float = 90) -> None:
        """Return once the ASGI server (first start or a restart) accepts connections."""
        devstack.wait_for_port(self.port, timeout=timeout)

    def kill(self, name: str) -> None:
        """kill -9 the process group of service ``name``; the restarter starts it again."""
        proc = self.stack.get(name).proc
        assert proc is not None and proc.poll() is None, f"{name} is not running"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def worker_answers(self) -> bool:
        status, body, _ = self.call("GET", "/healthz")
        return bool(status == 200 and body and body.get("workers"))

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """One HTTP request; return (status, decoded JSON body or None, response headers)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Token {token}")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, _json(resp.read()), dict(resp.headers)
        except urllib.error.HTTPError as err:
            return err.code, _json(err.read()), dict(err.headers)

    def token(self, username: str = "alice") -> str:
        credentials = {
            "username": username,
            "password": self.env.get("SYNCLANE_DEMO_PASSWORD", "synclane-demo"),
        }
        status, body, _ = self.call("POST", "/api/v1/auth/token/", credentials)
        assert status == 200, body
        return str(body["token"])

    def session_cookie(self, username: str = "alice") -> str:
        """A logged-in session's cookie value, made in the stack's database."""
        code = (
            "from django.contrib.auth import get_user_model; from django.test import Client; "
            f"c = Client(); c.force_login(get_user_model().objects.get(username={username!r})); "
            "print(c.cookies['sessionid'].value)"
        )
        out = subprocess.run(
            [devstack.PYTHON, "manage.py", "shell", "-c", code],
            env=self.env,
            cwd=devstack.BASE_DIR,
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip().splitlines()[-1]

    def job(self, job_id: int, token: str) -> dict[str, Any]:
        status, body, _ = self.call("GET", f"/api/v1/jobs/{job_id}/", token=token)
        assert status == 200, body
        return dict(body)

    def wait_for_status(
        self, job_id: int, token: str, statuses: set[str], *, timeout: float
    ) -> dict[str, Any]:
        """Poll the API until the job is in one of ``statuses``; return it."""

        def reached() -> dict[str, Any] | None:
            try:
                job = self.job(job_id, token)
            except (OSError, AssertionError):  # the server may be down for a moment
                return None
            return job if job["status"] in statuses else None

        return wait_until(
            reached, timeout=timeout, interval=0.3, what=f"job {job_id} in {statuses}"
        )

    def stop(self) -> None:
        self.halt.set()
        self.stack.stop()
        self.redis.stop()
        from workers.supervisor.process import kill_leftover_groups

        kill_leftover_groups(self.workdir / "jobs")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


# --- a websocket client that reconnects like the job page ---------------------------------


@dataclass
class Received:
    at: float  # time.monotonic() on receipt
    wall: float  # time.time() on receipt (runs stamp messages with this clock)
    message: dict[str, Any]


class ReconnectingListener(threading.Thread):
    """Collects every message of ``ws/jobs/<id>/``; reconnects after a drop, as live.js does.

    ``connections`` counts successful opens, so a test can tell that it reconnected.
    """

    def __init__(self, faults: FaultStack, job_id: int, cookie: str) -> None:
        super().__init__(daemon=True)
        self.uri = f"ws://127.0.0.1:{faults.port}/ws/jobs/{job_id}/"
        self.headers = {"Cookie": f"sessionid={cookie}", "Origin": faults.url}
        self.received: list[Received] = []
        self.connections = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            # Refused, reset, closed by the server: retry, like the page.
            with contextlib.suppress(Exception):
                asyncio.run(self._listen())
            self._halt.wait(0.5)

    async def _listen(self) -> None:
        async with websockets.connect(self.uri, additional_headers=self.headers) as ws:
            self.connections += 1
            while not self._halt.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
                except TimeoutError:
                    continue
                self.received.append(Received(time.monotonic(), time.time(), json.loads(raw)))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def metrics(self, *, after: float = float("-inf")) -> list[Received]:
        """Metrics messages received after monotonic time ``after``."""
        return [r for r in list(self.received) if r.at > after and r.message["type"] == "metrics"]
