"""What one GPU can check of the runtime; ``device_check.sh`` runs it under torchrun.

    torchrun --standalone --nproc-per-node N tests/gpu/device_check.py CHECK DEVICE BACKEND OUT

CHECK is ``train`` (wrap trains a model on the device: loss falls, parameters stay finite),
``equal`` (``full`` through ``wrap`` leaves the same parameters as plain DDP, bit for bit) or
``throttle`` (paced all-reduces of device tensors reach the emulated link's rate, not more;
two ranks or more: at world size 1 nothing crosses a link).
DEVICE is ``cuda`` or ``cpu`` (the dry run the test suite does on a machine without a GPU);
BACKEND is ``nccl`` or ``gloo``. Every rank uses ``cuda:<local rank % GPUs>``, so two ranks
share one GPU. Rank 0 writes ``{"check", "ok", ...figures}`` as JSON to OUT.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from workers.runtime.config import RuntimeConfig
from workers.runtime.engine import CommEngine
from workers.runtime.reporter import Reporter
from workers.runtime.session import wrap
from workers.runtime.stats import CommStats
from workers.runtime.throttle import TokenBucket, link_rate_fn

STEPS = 30
THROTTLE_MBPS = 100.0


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(32, 256)
        self.attn = nn.Linear(256, 256)  # critical for adaptive by name
        self.head = nn.Linear(256, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.embed(x))
        h = h + torch.tanh(self.attn(h))
        return F.cross_entropy(self.head(h), y)


def device_of(kind: str) -> torch.device:
    if kind == "cpu":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device("cuda", local % torch.cuda.device_count())


# Labels from a fixed random teacher: a task the model can learn, so its loss falls.
TEACHER = torch.randn(32, 8, generator=torch.Generator().manual_seed(7))


def batch(step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + step)
    x = torch.randn(64, 32, generator=g)
    return x.to(device), (x @ TEACHER).argmax(dim=1).to(device)


def fresh(device: torch.device) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = Net().to(device)
    return net, torch.optim.SGD(net.parameters(), lr=0.1)


def config(**changes: Any) -> RuntimeConfig:
    return RuntimeConfig(rank=dist.get_rank(), world_size=dist.get_world_size(), **changes)


def run(model: nn.Module, opt: torch.optim.Optimizer, device: torch.device) -> list[float]:
    losses = []
    for step in range(1, STEPS + 1):
        loss = model(*batch(step, device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def check_train(device: torch.device) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sync in ("full", "adaptive"):
        net, opt = fresh(device)
        model = wrap(
            net, optimizer=opt, config=config(sync=sync), reporter=Reporter(rank=dist.get_rank())
        )
        losses = run(model, opt, device)
        finite = all(bool(torch.isfinite(p).all()) for p in net.parameters())
        on_device = all(p.device == device for p in net.parameters())
        model.session.close()
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        out[sync] = {"first": first, "last": last, "finite": finite}
        out[sync]["ok"] = finite and on_device and last < 0.8 * first
    out["ok"] = all(out[s]["ok"] for s in ("full", "adaptive"))
    return out


def check_equal(device: torch.device) -> dict[str, Any]:
    net, opt = fresh(device)
    run(DistributedDataParallel(net), opt, device)
    plain = [p.detach().clone() for p in net.parameters()]
    net, opt = fresh(device)
    model = wrap(
        net, optimizer=opt, config=config(sync="full"), reporter=Reporter(rank=dist.get_rank())
    )
    run(model, opt, device)
    model.session.close()
    diff = max(float((a - b).abs().max()) for a, b in zip(plain, net.parameters(), strict=True))
    return {"max_abs_diff": diff, "ok": diff == 0.0}


def check_throttle(device: torch.device) -> dict[str, Any]:
    pacer = TokenBucket(
        link_rate_fn(link_mbps=THROTTLE_MBPS, allocation_bps=lambda: None, fault_factor=lambda: 1.0)
    )
    engine = CommEngine(
        group=dist.new_group(), pacer=pacer, stats=CommStats(), rank=dist.get_rank(),
        chunk_bytes=1 << 20,
    )  # fmt: skip
    tensor = torch.ones(64 * 1024, device=device)  # 256 KiB
    engine.allreduce(tensor.clone())  # the first transfer settles the bucket
    dist.barrier()
    granted, began = pacer.granted_bytes, time.perf_counter()
    for fut in [engine.submit(tensor.clone(), flush=True) for _ in range(20)]:
        fut.wait()
    ratio = (pacer.granted_bytes - granted) * 8 / (time.perf_counter() - began) / 1e6
    ratio /= THROTTLE_MBPS
    engine.close()
    # At most the link's rate (5% for timer slack). At least 60% of it on a GPU machine; the
    # CPU dry run in the test suite shares two loaded cores, so it asks only for 20%.
    floor = 0.6 if device.type == "cuda" else 0.2
    return {"achieved_over_link": ratio, "ok": floor <= ratio <= 1.05}


CHECKS = {"train": check_train, "equal": check_equal, "throttle": check_throttle}


def main() -> None:
    check, kind, backend, out_path = sys.argv[1:5]
    torch.set_num_threads(1)
    device = device_of(kind)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    try:
        result = {"check": check, "device": str(device), "backend": backend,
                  "world": dist.get_world_size(), **CHECKS[check](device)}  # fmt: skip
    finally:
        dist.barrier()
    if dist.get_rank() == 0:
        with open(out_path, "w") as fh:
            json.dump(result, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
