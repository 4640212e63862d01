"""The systemd units in deploy/ are valid, and run what the devstack runs."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from controlplane import devstack

DEPLOY = devstack.BASE_DIR / "deploy"
SERVICES = ["synclane-asgi", "synclane-ingest", "synclane-worker", "synclane-beat"]


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read(DEPLOY / name)
    return parser


def exec_start(name: str) -> list[str]:
    return shlex.split(unit(f"{name}.service")["Service"]["ExecStart"])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_every_unit_passes_systemd_analyze_verify(tmp_path: Path):
    # As installed here: this checkout for /opt/synclane, no dedicated user.
    for path in [*DEPLOY.glob("*.service"), DEPLOY / "synclane.target"]:
        text = path.read_text().replace("/opt/synclane", str(devstack.BASE_DIR))
        text = text.replace("/etc/synclane/synclane.env", str(DEPLOY / "synclane.env.example"))
        lines = [ln for ln in text.splitlines() if not ln.startswith(("User=", "Group="))]
        (tmp_path / path.name).write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_there_is_a_unit_for_each_process_and_the_target_wants_them_all():
    wants = unit("synclane.target")["Unit"]["Wants"].split()
    assert wants == [f"{name}.service" for name in SERVICES]
    for name in SERVICES:
        service = unit(f"{name}.service")["Service"]
        assert service["Restart"] == "always"
        assert service["EnvironmentFile"] == "/etc/synclane/synclane.env"


def test_the_worker_consumes_the_devstack_queues_and_runs_no_beat():
    argv, dev = exec_start("synclane-worker"), devstack.worker_argv(4, Path("."))
    assert argv[argv.index("-Q") + 1] == dev[dev.index("-Q") + 1] == "control,runs"
    assert "-B" not in argv and "--beat" not in argv
    assert exec_start("synclane-beat")[1:4] == ["-A", "workers", "beat"]


def test_a_stopping_worker_has_time_to_checkpoint_its_runs():
    service = unit("synclane-worker.service")["Service"]
    # SIGTERM to the worker alone: it drains its supervisors itself.
    assert service["KillMode"] == "mixed"
    assert float(service["TimeoutStopSec"]) >= devstack.worker_stop_grace_s({})
