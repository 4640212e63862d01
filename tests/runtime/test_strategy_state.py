"""A checkpoint keeps the sync strategy's state, and a resumed run picks it up (2 real ranks)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.workloads.test_tiny_gpt import TORCHRUN, torchrun_env

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist
    from torch import nn
    from synclane import Checkpointer, wrap

    def show(state):  # tensors (adaptive's outer momentum) as lists
        return json.dumps(state, default=lambda t: t.tolist())

    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    model = wrap(net, optimizer=optimizer)
    with Checkpointer(model, optimizer, every=steps) as ckpt:
        start = ckpt.resume()
        if dist.get_rank() == 0:
            print("RESUMED " + show(model.session.strategy.state_dict()), flush=True)
        for step in range(start + 1, steps + 1):
            x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step * 7 + dist.get_rank()))
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ckpt.step_done(step)
        if dist.get_rank() == 0:
            print("SAVED " + show(model.session.strategy.state_dict()), flush=True)
        ckpt.close()
    """
)


def run(script: Path, run_dir: Path, steps: int, sync: str, **settings: str) -> dict[str, dict]:
    env = torchrun_env(
        SYNCLANE_SYNC=sync, SYNCLANE_RUN_DIR=str(run_dir), SYNCLANE_PROBE_EVERY="0", **settings
    )
    cmd = [*TORCHRUN, "--nproc-per-node", "2", str(script), str(steps)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in done.stdout.splitlines()
        if line.startswith(("RESUMED ", "SAVED "))
    }


@pytest.mark.dist
@pytest.mark.parametrize("sync", ["localsgd", "adaptive", "powersgd"])
def test_a_resumed_run_continues_with_the_strategy_state_it_saved(tmp_path: Path, sync: str):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    first = run(script, tmp_path / "run", 40, sync)
    assert first["RESUMED"] != first["SAVED"]  # the state moved during the 40 steps
    second = run(script, tmp_path / "run", 45, sync)
    assert second["RESUMED"] == first["SAVED"]


@pytest.mark.dist
def test_a_resumed_run_continues_with_adaptives_outer_momentum(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    settings = {"SYNCLANE_OUTER_MOMENTUM": "0.5"}
    first = run(script, tmp_path / "run", 40, "adaptive", **settings)
    saved = first["SAVED"]
    assert any(v != 0 for v in saved["outer"])  # averages took place and carried momentum
    assert saved["outer_layout"]
    second = run(script, tmp_path / "run", 45, "adaptive", **settings)
    assert second["RESUMED"] == saved
