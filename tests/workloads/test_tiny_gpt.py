"""tiny_gpt end to end under a real 2-rank torchrun (gloo), plus its pure parts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import torch

from workers import public
from workers.runtime import checkpoint_files
from workers.runtime import protocol as p
from workers.workloads.tiny_gpt import CharData, GPTConfig, TinyGPT


def torchrun_env(**extra: str) -> dict[str, str]:
    """Environment for a 2-core machine: one thread per rank, loopback for gloo, and
    ``import synclane`` resolvable as the launcher makes it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLANE_")}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    env["PYTHONPATH"] = public.pythonpath()
    env.update(extra)
    return env


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]


def _torchrun(
    args: list[str], *, nproc: int = 2, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    cmd = [*TORCHRUN, "--nproc-per-node", str(nproc), "-m", "workers.workloads.tiny_gpt", *args]
    return subprocess.run(
        cmd, env=torchrun_env(**env), capture_output=True, text=True, timeout=timeout
    )


def _final_loss(stdout: str) -> str:
    return [line for line in stdout.splitlines() if line.startswith("step ")][-1].split()[3]


def test_the_shipped_text_splits_into_train_and_held_out_validation() -> None:
    data = CharData()
    assert len(data.vocab) < 128
    assert len(data.val) == pytest.approx(0.1 * (len(data.train) + len(data.val)), rel=0.01)
    x, y = data.batch("val", batch_size=3, seq_len=8, seed=1)
    assert x.shape == (3, 8) and torch.equal(x[:, 1:], y[:, :-1])


def test_the_default_model_is_small() -> None:
    model = TinyGPT(GPTConfig(vocab_size=96))
    assert sum(q.numel() for q in model.parameters()) < 300_000


@pytest.mark.dist
def test_a_two_rank_run_reports_checkpoints_and_resumes(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    run = tmp_path / "run"
    env = {p.ENV_REDIS_URL: redis_url, p.ENV_JOB_ID: "31"}
    first = _torchrun(
        ["--steps", "6", "--checkpoint-every", "3", "--run-dir", str(run), "--eval-every", "3"],
        **env,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(f.name for f in run.glob("ckpt-*")) == [
        "ckpt-00000003.pt",
        "ckpt-00000003.pt.sha256",
        "ckpt-00000006.pt",
        "ckpt-00000006.pt.sha256",
    ]

    metrics = [
        json.loads(f["data"])
        for _, f in r.xrange(p.telemetry_stream("31"))
        if f["type"] == p.MSG_METRICS
    ]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    for field in (
        "loss",
        "samples_per_s",
        "tokens_per_s",
        "step_time_s",
        "comm_time_s",
        "bytes_sent",
        "ts",
        "rank",
    ):
        assert field in metrics[0], field
    assert metrics[0]["bytes_sent"] > 0 and metrics[0]["rank"] == 0
    assert [m["step"] for m in metrics if "val_loss" in m] == [3, 6]
    assert r.smembers(p.ACTIVE_STREAMS_KEY) == {"31"}

    second = _torchrun(["--steps", "8", "--checkpoint-every", "4", "--run-dir", str(run)], **env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed_from_step=6" in second.stdout
    events = [
        json.loads(f["data"])
        for _, f in r.xrange(p.telemetry_stream("31"))
        if f["type"] == p.MSG_EVENT
    ]
    assert {"kind": "resumed", "resumed_from_step": 6}.items() <= events[-2].items()


@pytest.mark.dist
def test_a_resumed_run_ends_with_the_same_loss_as_an_uninterrupted_one(tmp_path: Path) -> None:
    straight = _torchrun(
        [
            "--steps",
            "8",
            "--checkpoint-every",
            "0",
            "--run-dir",
            str(tmp_path / "a"),
            "--log-every",
            "1",
        ]
    )
    half = _torchrun(["--steps", "4", "--checkpoint-every", "4", "--run-dir", str(tmp_path / "b")])
    rest = _torchrun(
        [
            "--steps",
            "8",
            "--checkpoint-every",
            "0",
            "--run-dir",
            str(tmp_path / "b"),
            "--log-every",
            "1",
        ]
    )
    assert straight.returncode == half.returncode == rest.returncode == 0, rest.stderr[-3000:]
    assert _final_loss(rest.stdout) == _final_loss(straight.stdout)


@pytest.mark.dist
def test_sigterm_checkpoints_and_exits_with_the_documented_code(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [
        *TORCHRUN,
        "--nproc-per-node",
        "2",
        "-m",
        "workers.workloads.tiny_gpt",
        "--steps",
        "100000",
        "--checkpoint-every",
        "0",
        "--run-dir",
        str(run),
        "--log-every",
        "5",
    ]
    proc = subprocess.Popen(
        cmd,
        env=torchrun_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until training is really under way
        if line.startswith("step 10/"):
            break
    os.killpg(proc.pid, signal.SIGTERM)
    start = time.monotonic()
    proc.communicate(timeout=60)
    assert time.monotonic() - start < 30
    exit_info = json.loads((run / p.EXIT_FILE).read_text())
    assert exit_info["code"] == p.EXIT_STOPPED_AFTER_CHECKPOINT
    latest = checkpoint_files.latest_valid(run)
    assert latest is not None
    step, path = latest
    assert torch.load(path, weights_only=False)["step"] == step == exit_info["step"] >= 10
