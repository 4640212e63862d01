"""The built-in catalogue: every workload is offered, its data is the package's, and it learns."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path

import pytest
import redis
import torch

from controlplane.jobs.choices import Workload
from tests.workloads.test_tiny_gpt import TORCHRUN, torchrun_env
from workers.runtime import protocol as p
from workers.supervisor.command import WORKLOAD_MODULES
from workers.workloads import shapes_cnn, topics_encoder

NEW_FAMILIES = ("shapes_cnn", "topics_encoder")


def test_jobs_offer_exactly_the_workloads_the_launcher_can_run() -> None:
    assert set(Workload.values) == set(WORKLOAD_MODULES) >= {"tiny_gpt", *NEW_FAMILIES}


@pytest.mark.parametrize("task", [shapes_cnn.TASK, topics_encoder.TASK], ids=lambda t: t.name)
def test_the_dataset_is_generated_the_same_every_time_and_holds_every_class(task) -> None:
    args = argparse.Namespace(seq_len=task.seq_len)
    (train, val), (again, _) = task.data(args), task.data(args)
    assert torch.equal(train.x, again.x) and torch.equal(train.y, again.y)
    assert len(train.y) == 4096 and len(val.y) == 512
    assert set(train.y.tolist()) == set(val.y.tolist()) == set(range(4))
    assert task.model(args)(train.x[:3]).shape == (3, 4)


@pytest.mark.dist
@pytest.mark.parametrize("workload", NEW_FAMILIES)
def test_it_learns_on_two_ranks(workload: str, tmp_path: Path, r: redis.Redis, redis_url: str):
    cmd = [*TORCHRUN, "--nproc-per-node", "2", "-m", WORKLOAD_MODULES[workload], "--steps",
           "120", "--eval-every", "0", "--run-dir", str(tmp_path)]  # fmt: skip
    env = torchrun_env(**{p.ENV_REDIS_URL: redis_url, p.ENV_JOB_ID: "77"})
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    metrics = [
        json.loads(f["data"])
        for _, f in r.xrange(p.telemetry_stream("77"))
        if f["type"] == p.MSG_METRICS
    ]
    assert [m["step"] for m in metrics] == list(range(1, 121))
    first = sum(m["loss"] for m in metrics[:5]) / 5
    assert first == pytest.approx(math.log(4), rel=0.2)  # chance level: four classes
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["val_loss"] < 0.6 * first
    assert summary["val_accuracy"] > 0.7
    assert sorted(f.name for f in tmp_path.glob("ckpt-*.pt")) == [  # every 50, the last two
        "ckpt-00000050.pt",
        "ckpt-00000100.pt",
    ]
