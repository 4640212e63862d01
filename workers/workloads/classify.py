"""The training loop of the catalogue's classifiers (``shapes_cnn``, ``topics_encoder``).

    torchrun --standalone --nnodes 1 --nproc-per-node 2 -m workers.workloads.shapes_cnn \
        --steps 200 --checkpoint-every 50 --run-dir run/shapes [--sync full]

A task brings a model and a dataset generated deterministically inside the package (no
downloads); this loop trains it the way docs/user-guide.md tells a user to: ``import
synclane``, ``wrap()`` the model, ``Reporter`` for metrics, ``Checkpointer`` for checkpoints,
resume and SIGTERM. Batches are drawn by (seed, rank, step) alone, so a resumed run sees the
batches an uninterrupted one would. Exit status as tiny_gpt: 0, 75 (stopped), 76 (link).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from synclane import Checkpointer, Reporter, RuntimeConfig, SynclaneDDP, wrap
from torch import nn
from torch.nn import functional as F

from workers.runtime import protocol as p

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class Split:
    """Inputs and class labels of one split, as tensors."""

    x: torch.Tensor
    y: torch.Tensor


@dataclass(frozen=True, kw_only=True)
class Task:
    """What a catalogue classifier supplies: its name, data and model, and its defaults."""

    name: str
    data: Callable[[argparse.Namespace], tuple[Split, Split]]  # (train, held-out validation)
    model: Callable[[argparse.Namespace], nn.Module]
    lr: float = 3e-3
    batch_size: int = 32
    seq_len: int = 32  # only sequence tasks read it


def parse_args(task: Task, argv: Sequence[str] | None) -> argparse.Namespace:
    """The flags every built-in workload takes (the launcher passes the same ones)."""
    ap = argparse.ArgumentParser(prog=task.name)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--checkpoint-every", type=int, default=50, help="0: only on stop")
    ap.add_argument("--run-dir", default=os.environ.get(p.ENV_RUN_DIR) or f"run/{task.name}")
    ap.add_argument(
        "--sync",
        default=os.environ.get(p.ENV_SYNC) or p.SYNC_FULL,
        choices=(*p.SYNC_STRATEGIES, p.SYNC_NONE),
    )
    ap.add_argument("--batch-size", type=int, default=task.batch_size, help="per rank")
    ap.add_argument("--seq-len", type=int, default=task.seq_len)
    ap.add_argument("--eval-every", type=int, default=50, help="0: only at the end")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=task.lr)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 0 or args.batch_size < 1 or args.seq_len < 4:
        ap.error("steps, batch-size >= 1; seq-len >= 4; checkpoint-every >= 0")
    return args


def main(task: Task, argv: Sequence[str] | None = None) -> int:
    """Train ``task`` on this rank; return the exit status (0 when every step ran)."""
    args = parse_args(task, argv)
    torch.set_num_threads(1)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    config = RuntimeConfig.from_env(
        sync=args.sync, run_dir=args.run_dir, rank=dist.get_rank(), world_size=dist.get_world_size()
    )
    train_split, val_split = task.data(args)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    net = task.model(args)
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr)
    reporter = Reporter.from_env(config)
    model = wrap(net, optimizer=optimizer, config=config, reporter=reporter)
    with Checkpointer(model, optimizer, run_dir=args.run_dir, every=args.checkpoint_every) as ckpt:
        start = ckpt.resume()
        if dist.get_rank() == 0:
            params = sum(q.numel() for q in net.parameters())
            print(f"{task.name}: {params} params, sync {args.sync}, steps {start}->{args.steps}")
        started = time.perf_counter()
        for step in range(start + 1, args.steps + 1):
            metrics = train_step(model, optimizer, train_split, args, step=step)
            if step == args.steps or (args.eval_every and step % args.eval_every == 0):
                if args.sync not in (p.SYNC_FULL, p.SYNC_POWERSGD):
                    model.session.synchronize()  # evaluate one model, not a replica
                metrics.update(evaluate(model.module, val_split))
            reporter.log(metrics, step=step)
            if dist.get_rank() == 0 and (step % args.log_every == 0 or "val_loss" in metrics):
                print(_progress(step, args.steps, metrics), flush=True)
            ckpt.step_done(step)  # saves every N steps; on SIGTERM: saves, exits 75
        _finish(task, args, steps_run=args.steps - start, wall=time.perf_counter() - started,
                metrics=metrics if args.steps > start else {}, reporter=reporter)  # fmt: skip
        ckpt.close()
    return p.EXIT_OK


def train_step(
    model: SynclaneDDP,
    optimizer: torch.optim.Optimizer,
    data: Split,
    args: argparse.Namespace,
    *,
    step: int,
) -> dict[str, float]:
    """One step on this rank's batch; return the step's figures."""
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(
        (args.seed * 1_000_003 + dist.get_rank()) * 1_000_033 + step
    )
    idx = torch.randint(0, len(data.y), (args.batch_size,), generator=gen)
    loss = F.cross_entropy(model(data.x[idx]), data.y[idx])
    model.session.note_loss(loss)  # the loss is computed outside forward
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    step_time = time.perf_counter() - t0
    comm = model.session.pop_step_stats()
    return {
        "loss": loss.item(),
        "samples_per_s": args.batch_size * dist.get_world_size() / step_time,
        "step_time_s": step_time,
        "comm_time_s": comm["comm_time_s"],
        "bytes_sent": comm["bytes_sent"],
    }


@torch.no_grad()
def evaluate(model: nn.Module, data: Split) -> dict[str, float]:
    """Validation loss and accuracy over the whole held-out split (each rank a share)."""
    model.eval()
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = data.x[rank::world], data.y[rank::world]
    logits = model(x)
    totals = torch.tensor(
        [
            F.cross_entropy(logits, y, reduction="sum").item(),
            (logits.argmax(dim=1) == y).sum().item(),
            float(len(y)),
        ],
        dtype=torch.float64,
    )
    dist.all_reduce(totals)
    model.train()
    return {"val_loss": float(totals[0] / totals[2]), "val_accuracy": float(totals[1] / totals[2])}


def _finish(
    task: Task,
    args: argparse.Namespace,
    *,
    steps_run: int,
    wall: float,
    metrics: dict[str, float],
    reporter: Reporter,
) -> None:
    """All steps ran: rank 0 writes the run's summary; the metrics rank reports it."""
    summary = {
        "workload": task.name,
        "sync": args.sync,
        "world_size": dist.get_world_size(),
        "steps": steps_run,
        "wall_s": wall,
        "val_loss": metrics.get("val_loss"),
        "val_accuracy": metrics.get("val_accuracy"),
    }
    if dist.get_rank() == 0 and steps_run > 0:
        Path(args.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.run_dir) / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    reporter.event("finished", **summary)


def _progress(step: int, steps: int, m: dict[str, float]) -> str:
    val = f" val {m['val_loss']:.4f} acc {m['val_accuracy']:.3f}" if "val_loss" in m else ""
    return (
        f"step {step}/{steps} loss {m['loss']:.4f}{val} {m['samples_per_s']:.0f} samples/s "
        f"step {m['step_time_s'] * 1e3:.1f}ms comm {m['comm_time_s'] * 1e3:.1f}ms"
    )


def run(task: Task) -> None:
    """``python -m workers.workloads.<task>`` entry point."""
    sys.exit(main(task))
