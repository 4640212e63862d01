"""Fit a fixed random function with ResidualMLP on every rank (torchrun ... train.py --width W)."""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from model import ResidualMLP
from synclane import Checkpointer, Reporter, wrap
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=16)
parser.add_argument("--step-sleep", type=float, default=0.0)
args = parser.parse_args()
steps = int(os.environ.get("SYNCLANE_STEPS", "20"))

dist.init_process_group("gloo")
torch.manual_seed(0)
net = ResidualMLP(inputs=8, width=args.width, depth=2)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
reporter = Reporter.from_env()
model = wrap(net, optimizer=optimizer, reporter=reporter)
teacher = torch.randn(8, 1, generator=torch.Generator().manual_seed(7))
rank = dist.get_rank()
out = Path(os.environ.get("SYNCLANE_RUN_DIR", "."))
if rank == 0:
    (out / "whoami.json").write_text(json.dumps({"uid": os.getuid(), "cwd": os.getcwd()}))

with Checkpointer(model, optimizer) as ckpt:
    for step in range(ckpt.resume() + 1, steps + 1):
        t0 = time.perf_counter()
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step * 10 + rank))
        loss = nn.functional.mse_loss(model(x), torch.sin(x @ teacher))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        took = time.perf_counter() - t0
        reporter.log(
            {"loss": loss.item(), "step_time_s": took, "samples_per_s": 64 / took}, step=step
        )
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_sleep)
        ckpt.step_done(step)
    ckpt.close()
