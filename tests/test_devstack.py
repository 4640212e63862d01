"""`make up`'s process supervision, on real processes: restart with backoff, stop all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest
import redis

from controlplane import devstack
from tests.faults import wait_until
from workers.supervisor.process import cmdline, descendants, parent_pid, pid_alive

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
QUITTER = [sys.executable, "-c", "import sys; sys.exit(3)"]


def check_until(stack: devstack.Stack, predicate, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        stack.check()
        time.sleep(0.05)


def test_a_service_that_exits_is_restarted_after_a_backoff_with_a_log_line():
    said: list[str] = []
    stack = devstack.Stack(say=said.append)
    first = stack.start("worker", SLEEPER, env=os.environ, restart=True)
    try:
        os.kill(first.pid, 9)
        first.wait()
        killed_at = time.monotonic()
        check_until(stack, lambda: stack.get("worker").proc is not first)

        assert time.monotonic() - killed_at >= devstack.RESTART_BASE_S * 0.9
        assert said[0] == "devstack: worker exited with code -9; restarting in 1 s (restart 1)"
        assert said[1].startswith("devstack: worker restarted (pid ")
        assert stack.get("worker").proc.poll() is None
    finally:
        stack.stop()


def test_a_service_that_keeps_exiting_waits_longer_each_time():
    said: list[str] = []
    stack = devstack.Stack(say=said.append)
    stack.start("ingest", QUITTER, env=os.environ, restart=True)
    try:
        check_until(stack, lambda: len(said) >= 4, timeout=30)
        delays = [line for line in said if "restarting in" in line]
        assert "restarting in 1 s (restart 1)" in delays[0]
        assert "restarting in 2 s (restart 2)" in delays[1]
    finally:
        stack.stop()


def test_a_service_started_without_restart_is_left_down():
    said: list[str] = []
    stack = devstack.Stack(say=said.append)
    proc = stack.start("once", QUITTER, env=os.environ)
    proc.wait()
    assert not stack.check() and said == []
    stack.stop()


def test_stop_ends_every_service_it_started_and_restarts_nothing_after():
    stack = devstack.Stack(say=lambda _: None)
    procs = [stack.start(n, SLEEPER, env=os.environ, restart=True) for n in ("a", "b", "c")]
    stack.stop()
    assert not any(pid_alive(p.pid) for p in procs)
    assert not stack.check() and stack.procs == []


@pytest.mark.integration
def test_make_up_restarts_a_killed_service_and_ctrl_c_stops_all_it_started(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"REDIS_URL", "DATABASE_URL", devstack.PRIVATE_REDIS_FLAG}
    }
    env.update(
        SYNCLANE_RUN_DIR=str(tmp_path),
        SYNCLANE_JOBS_DIR=str(tmp_path / "jobs"),
        PORT=str(devstack.free_port()),
        PYTHONUNBUFFERED="1",
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "controlplane.devstack", "up"],
        env=env,
        cwd=devstack.BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = Lines(up)
    try:
        lines.wait_for("Synclane is up", timeout=180)
        children = [pid for pid in descendants(up.pid) if parent_pid(pid) == up.pid]
        services = {name: pid for pid in children if (name := service_of(pid))}
        assert set(services) == {"redis", "beat", "worker", "ingest", "asgi"}, services
        # The private Redis's password is never printed: its URL is shown masked.
        password = urlsplit(environ_of(services["asgi"])["REDIS_URL"]).password
        assert password and lines.wait_for("private Redis at redis://:****@127.0.0.1:", timeout=1)
        assert not [line for line in lines.seen if password in line]

        os.kill(services["ingest"], signal.SIGKILL)
        lines.wait_for("devstack: ingest exited with code -9; restarting in 1 s", timeout=30)
        lines.wait_for("devstack: ingest restarted (pid ", timeout=30)
        assert pid_alive(services["worker"]), "only the dead service is restarted"

        # Its own Redis too: on the same port with the same password, so the URL every
        # service was given works again.
        os.kill(services["redis"], signal.SIGKILL)
        lines.wait_for("devstack: redis exited with code -9; restarting in 1 s", timeout=30)
        lines.wait_for("devstack: redis restarted (pid ", timeout=30)
        url = environ_of(services["asgi"])["REDIS_URL"]
        wait_until(lambda: _pings(url), 30, "the restarted Redis to answer")
        assert pid_alive(services["worker"]) and pid_alive(services["asgi"])

        os.kill(up.pid, signal.SIGINT)  # Ctrl-C
        lines.wait_for("stopped everything this stack started", timeout=90)
        assert up.wait(timeout=30) == 0
        started = [*services.values(), *lines.restarted_pids()]
        assert not [pid for pid in started if pid_alive(pid)]
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().decode().split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def service_of(pid: int) -> str | None:
    """Which devstack service a process is, from its command line (None: not a service)."""
    line = cmdline(pid)
    for name, mark in (
        ("redis", "redis-server"),
        ("beat", " beat "),
        ("worker", " worker "),
        ("ingest", "telemetry_ingest"),
        ("asgi", "controlplane.asgi_server"),
    ):
        if mark in f" {line} ":
            return name
    return None


class Lines:
    """The output of a process, read by a thread, searchable while it runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.seen.append(line.rstrip("\n"))

    def wait_for(self, text: str, *, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in list(self.seen) if text in line), None)
            if found is not None:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no line with {text!r} in {timeout:.0f} s; last: {self.seen[-15:]}")

    def restarted_pids(self) -> list[int]:
        marker = "restarted (pid "
        return [int(ln.split(marker)[1].rstrip(")")) for ln in self.seen if marker in ln]


def test_up_with_several_nodes_starts_one_worker_per_node_with_its_own_name_address_and_queue():
    stack = devstack.Stack()
    # A harmless stand-in for the worker: the argv and environment are what is checked.
    stack.start = lambda name, argv, *, env, **_: stack.services.append(  # type: ignore[method-assign]
        devstack.Service(name, list(argv), dict(env), None, True, 1.0)
    )
    nodes = devstack.start_nodes(stack, {"SYNCLANE_NODE_SLOTS": ""}, devstack.BASE_DIR, nodes=3)
    assert [n.name for n in nodes] == ["n1", "n2", "n3"]
    workers = {s.name: s for s in stack.services}
    n2 = workers["worker-n2"]
    assert n2.env["SYNCLANE_NODE_NAME"] == "n2" and n2.env["SYNCLANE_NODE_ADDRESS"] == "127.0.0.2"
    assert n2.env["SYNCLANE_NODE_SLOTS"] == "2"  # so a 4-rank job spans two nodes
    assert n2.argv[n2.argv.index("-Q") + 1] == "control,runs,node.n2"
    assert "--hostname=synclane-n2@%h" in n2.argv and "--concurrency=4" in n2.argv


@pytest.mark.parametrize(
    ("args", "nodes"),
    [(["--nodes", "2"], 2), (["--nodes=3"], 3), (["--nodes", "0"], 0), (["--nodes", "x"], 0),
     (["--nodes", "10"], 0), (["2"], 0)],
)  # fmt: skip
def test_up_reads_the_number_of_nodes_and_refuses_anything_else(args, nodes):
    assert devstack._nodes_arg(args) == nodes


# --- the private Redis: its default user needs a password ---------------------------------


def test_the_private_redis_refuses_its_default_user_without_the_password(tmp_path):
    stack = devstack.Stack(say=lambda _: None)
    try:
        url = devstack.start_private_redis(stack, tmp_path)
        password = redis.Redis.from_url(url).connection_pool.connection_kwargs["password"]
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert url == f"redis://:{password}@127.0.0.1:{port}/0" and len(password) >= 32

        admin = redis.Redis.from_url(url, decode_responses=True)
        assert admin.ping() and admin.acl_whoami() == "default"
        for user, wrong in ((None, None), ("default", None), ("default", "x" * 43), (None, "x")):
            with pytest.raises(redis.AuthenticationError):
                redis.Redis(port=port, username=user, password=wrong).keys("*")
        admin.close()
    finally:
        stack.stop()


def test_the_password_is_in_a_file_of_its_owner_alone_and_not_on_the_command_line(tmp_path):
    port, password = devstack.free_port(), devstack.new_redis_password()
    argv = devstack.redis_server_argv(port, tmp_path / "redis", password=password)
    assert not [arg for arg in argv if password in arg]
    auth = devstack.redis_auth_file(tmp_path / "redis", port)
    assert argv[1] == str(auth) and auth.read_text() == f"requirepass {password}\n"
    assert auth.stat().st_mode & 0o777 == 0o600


def test_a_restart_with_the_same_password_keeps_the_url_valid(tmp_path):
    port, password = devstack.free_port(), devstack.new_redis_password()
    url = devstack.private_redis_url(port, password)
    for _ in range(2):  # started, killed, started again as tests/faults.py does
        proc = subprocess.Popen(
            devstack.redis_server_argv(port, tmp_path, password=password),
            stdout=subprocess.DEVNULL,
        )
        try:
            devstack.wait_for_port(port, timeout=15, proc=proc)
            assert redis.Redis.from_url(url).ping()
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("password", ["", "short", "has space in it 0123456789", "new\nline" * 4])
def test_a_password_that_would_not_fit_a_config_line_or_a_url_is_refused(tmp_path, password):
    with pytest.raises(ValueError, match="private Redis password"):
        devstack.redis_server_argv(devstack.free_port(), tmp_path, password=password)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6400/0", "redis://:****@127.0.0.1:6400/0"),
        ("redis://ops:s3cret@redis.internal:6379/2", "redis://ops:****@redis.internal:6379/2"),
        ("redis://127.0.0.1:6400/0", "redis://127.0.0.1:6400/0"),
    ],
)
def test_a_url_is_shown_with_its_password_masked(url, shown):
    assert devstack.masked_url(url) == shown


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=2).ping())
    except redis.RedisError:
        return False


def test_pytest_arguments_still_run_browser_tests_in_a_process_of_their_own():
    # Playwright leaves an event loop running in its process: asyncio tests after a browser
    # test in the same process fail, so arguments such as --durations keep the split.
    runs = devstack.pytest_runs(["--durations=5", "tests/runtime"])
    assert [run[3:] for run in runs] == [
        ["-m", "not browser", "--durations=5", "tests/runtime"],
        ["-m", "browser", "--durations=5", "tests/runtime"],
    ]
    assert devstack.pytest_runs([]) == [
        [devstack.PYTHON, "-m", "pytest", "-m", "not browser"],
        [devstack.PYTHON, "-m", "pytest", "-m", "browser"],
    ]
    # Markers chosen by the caller run as given, in one process.
    assert devstack.pytest_runs(["-m", "browser", "-x"]) == [
        [devstack.PYTHON, "-m", "pytest", "-m", "browser", "-x"]
    ]


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([0, 0], 0),
        ([0, 5], 0),  # no browser test among the arguments
        ([5, 0], 0),  # only browser tests among them
        ([5, 5], 5),  # nothing collected: an empty suite fails
        ([1, 0], 1),
        ([0, 1], 1),
        ([5, 2], 2),
        ([0], 0),
    ],
)
def test_the_runs_exit_codes_combine_into_the_first_failure(codes, expected):
    assert devstack.combined_exit_code(codes) == expected
