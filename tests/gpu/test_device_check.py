"""The GPU check script, dry-run on CPU: the same checks with gloo and CPU tensors.

This proves the script and its checks work here; what only a GPU can show (NCCL, CUDA
tensors in the engine) needs ``tests/gpu/device_check.sh`` run on a machine with one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("device_check.sh")


@pytest.mark.dist
def test_the_device_check_passes_its_dry_run_on_cpu_and_says_so_in_one_line() -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--cpu"],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[0]
    assert summary.startswith("device_check cpu: 7/7 ok | "), summary
    for name in ("train-gloo-1", "equal-gloo-1", "train-gloo-2", "equal-gloo-2", "throttle-gloo-2"):
        assert f"{name} ok" in summary
    assert "zoo-gloo-1 ok 3 runs" in summary and "zoo-gloo-2 ok 3 runs" in summary
