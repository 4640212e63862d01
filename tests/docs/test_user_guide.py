"""docs/user-guide.md's example, run exactly as written on a real 2-rank torchrun.

It gets the environment a job's ranks get (``build_env``), is stopped with SIGTERM as a
preemption stops it, and resumes from its checkpoint step.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from workers.runtime import checkpoint_files
from workers.runtime import protocol as p
from workers.supervisor.command import LaunchSpec, build_env

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
JOB_ID = 4242


def example_script() -> str:
    """The guide's first python block that starts with ``# train.py``, byte for byte."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    return next(b for b in blocks if b.startswith("# train.py"))


def job_env(run_dir: Path, redis_url: str) -> dict[str, str]:
    """What the launcher gives a job's ranks (the workload field does not enter the env)."""
    spec = LaunchSpec(
        job_id=JOB_ID,
        workload="tiny_gpt",
        world_size=2,
        steps=100,
        sync="full",
        run_dir=run_dir,
        redis_url=redis_url,
        checkpoint_every=10,
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLANE_")}
    return build_env(spec, base)


def torchrun(bundle: Path, steps: int, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc-per-node", "2", "train.py", str(steps)]  # fmt: skip
    return subprocess.Popen(
        cmd,
        cwd=bundle,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def metrics(r: redis.Redis) -> list[dict[str, float]]:
    stream = r.xrange(p.telemetry_stream(JOB_ID))
    return [json.loads(f["data"]) for _, f in stream if f["type"] == p.MSG_METRICS]


def wait_for_step(r: redis.Redis, step: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not any(m["step"] >= step for m in metrics(r)):
        assert proc.poll() is None, "the example exited before it was stopped"
        assert time.monotonic() < deadline, f"no metrics for step {step} within 120 s"
        time.sleep(0.1)


def test_the_example_is_between_20_and_30_lines() -> None:
    assert 20 <= len(example_script().splitlines()) <= 30


@pytest.mark.dist
def test_the_example_runs_stops_on_sigterm_and_resumes_from_its_checkpoint(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    bundle, run_dir = tmp_path / "bundle", tmp_path / "run"
    bundle.mkdir()
    (bundle / "train.py").write_text(example_script())
    env = job_env(run_dir, redis_url)

    # 1. A long run, stopped with SIGTERM (what preemption sends) once it is training.
    first = torchrun(bundle, 100_000, env)
    wait_for_step(r, 25, first)
    os.killpg(first.pid, signal.SIGTERM)
    out, _ = first.communicate(timeout=60)
    exit_info = json.loads((run_dir / p.EXIT_FILE).read_text())
    assert exit_info["code"] == p.EXIT_STOPPED_AFTER_CHECKPOINT, out[-3000:]
    stopped_at = exit_info["step"]
    assert checkpoint_files.latest_valid(run_dir) == (
        stopped_at,
        checkpoint_files.checkpoint_path(run_dir, stopped_at),
    )
    assert stopped_at >= 25

    # 2. The same script started again resumes from that step and runs to the end.
    second = torchrun(bundle, stopped_at + 40, env)
    out, _ = second.communicate(timeout=180)
    assert second.returncode == 0, out[-3000:]
    assert f"resumed_from_step={stopped_at}" in out
    resumed = [m["step"] for m in metrics(r) if m["step"] > stopped_at]
    assert resumed[0] == stopped_at + 1 and resumed[-1] == stopped_at + 40
    events = [json.loads(f["data"]) for _, f in r.xrange(p.telemetry_stream(JOB_ID))]
    assert {"kind": "resumed", "resumed_from_step": stopped_at}.items() <= next(
        e.items() for e in events if e.get("kind") == "resumed"
    )

    # 3. And it learns: the loss after the resume is far below the first steps' loss.
    losses = {m["step"]: m["loss"] for m in metrics(r)}
    early = sum(losses[s] for s in range(1, 6)) / 5
    late = sum(losses[s] for s in range(stopped_at + 36, stopped_at + 41)) / 5
    assert late < 0.5 * early
