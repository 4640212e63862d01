"""tiny_gpt: a small character-level GPT, trained data-parallel with the Synclane runtime.

    torchrun --standalone --nnodes 1 --nproc-per-node 2 -m workers.workloads.tiny_gpt \
        --steps 200 --checkpoint-every 50 --run-dir run/demo [--sync full]

Trains on the Jargon File lexicon shipped in ``workers/workloads/data`` (public domain; see
the README there): first 90% of characters for training, last 10% held out for validation.
It uses the runtime exactly as docs/user-guide.md tells a user to: ``import synclane``,
``wrap()`` the model, ``Reporter`` for telemetry, ``Checkpointer`` for checkpoints in
``--run-dir`` (atomic; a restart resumes from the newest valid one).

Exit status: 0 when all steps ran; ``EXIT_STOPPED_AFTER_CHECKPOINT`` (75) when SIGTERM/SIGINT
stopped it after writing a checkpoint; ``EXIT_LINK_FAILED`` (76) when the link failed (rank 0
also writes ``RUN_DIR/exit.json`` for both).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from synclane import Checkpointer, Reporter, RuntimeConfig, SynclaneDDP, wrap
from torch import nn
from torch.nn import functional as F

from workers.runtime import protocol as p
from workers.runtime.reporter import AllocationClient

DATA_FILE = Path(__file__).with_name("data") / "jargon_lexicon_a_to_e.txt"
VAL_FRACTION = 0.1
EVAL_BATCHES = 8
SUMMARY_FILE = "summary.json"  # rank 0 writes it at the end of a run that completed
# Figures from the runtime's session that go into each metrics message when present.
REPORTED_FIGURES = ("busbw_bps", *p.LINK_FIGURES, *p.STRATEGY_FIGURES)


# ---------------------------------------------------------------- data


class CharData:
    """The shipped text as token ids, split into train and held-out validation."""

    def __init__(self, path: Path = DATA_FILE) -> None:
        text = path.read_text(encoding="ascii")
        self.vocab = sorted(set(text))
        index = {ch: i for i, ch in enumerate(self.vocab)}
        ids = torch.tensor([index[ch] for ch in text], dtype=torch.long)
        cut = int(len(ids) * (1 - VAL_FRACTION))
        self.train, self.val = ids[:cut], ids[cut:]

    def batch(
        self, split: str, *, batch_size: int, seq_len: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (inputs, targets) drawn with a generator seeded by ``seed`` alone.

        Seeding per (seed, rank, step) instead of carrying generator state makes a resumed
        run draw exactly the batches an uninterrupted one would.
        """
        data = self.train if split == "train" else self.val
        gen = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
        x = torch.stack([data[s : s + seq_len] for s in starts.tolist()])
        y = torch.stack([data[s + 1 : s + seq_len + 1] for s in starts.tolist()])
        return x, y


# ---------------------------------------------------------------- model


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    vocab_size: int
    seq_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError("n_embd must be divisible by n_head")


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.seq_len, cfg.n_embd)
        self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.n_layer)))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Return the mean cross-entropy of next-character prediction."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        h = self.ln_f(self.blocks(self.tok(idx) + self.pos(pos)))
        logits = self.head(h)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# ---------------------------------------------------------------- training


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="tiny_gpt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--checkpoint-every", type=int, default=50, help="0 disables checkpoints")
    ap.add_argument("--run-dir", default=os.environ.get(p.ENV_RUN_DIR) or "run/tiny_gpt")
    ap.add_argument(
        "--sync",
        default=os.environ.get(p.ENV_SYNC) or p.SYNC_FULL,
        choices=(*p.SYNC_STRATEGIES, p.SYNC_NONE),
    )
    ap.add_argument("--job", default=os.environ.get(p.ENV_JOB_ID), help="job id for telemetry")
    ap.add_argument("--batch-size", type=int, default=16, help="sequences per rank per step")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=50, help="0: evaluate only at the end")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--no-resume", action="store_true", help="ignore checkpoints in --run-dir")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 0 or args.batch_size < 1 or args.seq_len < 2:
        ap.error("steps, batch-size >= 1; seq-len >= 2; checkpoint-every >= 0")
    return args


def init_distributed() -> tuple[int, int]:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size()


@torch.no_grad()
def evaluate(model: nn.Module, data: CharData, args: argparse.Namespace) -> float:
    """Return the validation loss averaged over ranks (fixed batches; each rank its share)."""
    model.eval()
    rank, world = dist.get_rank(), dist.get_world_size()
    losses = [
        model(
            *data.batch("val", batch_size=args.batch_size, seq_len=args.seq_len, seed=10_000 + i)
        ).item()
        for i in range(rank, EVAL_BATCHES * world, world)
    ]
    model.train()
    total = torch.tensor([sum(losses), float(len(losses))], dtype=torch.float64)
    dist.all_reduce(total)
    return float(total[0] / total[1])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    rank, world = init_distributed()
    run_dir = Path(args.run_dir)
    cfg = RuntimeConfig.from_env(
        sync=args.sync, job_id=args.job, run_dir=str(run_dir), rank=rank, world_size=world
    )
    reporter = Reporter.from_env(cfg)
    allocation = AllocationClient.from_env(cfg).start()

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    data = CharData()
    gpt = TinyGPT(
        GPTConfig(
            vocab_size=len(data.vocab),
            seq_len=args.seq_len,
            n_layer=args.n_layer,
            n_embd=args.n_embd,
        )
    )
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=args.lr, weight_decay=0.0)
    model = wrap(gpt, optimizer=optimizer, config=cfg, reporter=reporter, allocation=allocation)
    # Saves every --checkpoint-every steps and resumes the newest valid checkpoint; on SIGTERM
    # (preemption, cancel) or a link failure it saves and exits with the documented code.
    with Checkpointer(model, optimizer, run_dir=run_dir, every=args.checkpoint_every) as ckpt:
        start = 0 if args.no_resume else ckpt.resume()
        if rank == 0:
            n_params = sum(q.numel() for q in gpt.parameters())
            print(
                f"tiny_gpt: {n_params} params, world {world}, sync {args.sync}, steps {start}->{args.steps}",
                flush=True,
            )
        train(model, optimizer, data, args, start=start, ckpt=ckpt, reporter=reporter)
    ckpt.close()  # the session (and its allocation client), the reporter, the process group
    return p.EXIT_OK


@dataclass
class RunTotals:
    """What the end-of-run summary adds up over the steps this process ran."""

    started: float = field(default_factory=time.perf_counter)
    bytes_sent: int = 0
    comm_time_s: float = 0.0
    reissued: int = 0  # gradient chunks re-issued on a degraded link

    def add(self, comm: dict[str, float]) -> None:
        self.bytes_sent += int(comm["bytes_sent"])
        self.comm_time_s += comm["comm_time_s"]
        self.reissued += int(comm.get("reissued", 0))


def train(
    model: SynclaneDDP,
    optimizer: torch.optim.Optimizer,
    data: CharData,
    args: argparse.Namespace,
    *,
    start: int,
    ckpt: Checkpointer,
    reporter: Reporter,
) -> None:
    """Run steps ``start+1 .. args.steps``; write the summary when the last step ran.

    A stop signal leaves through ``ckpt.step_done`` (a checkpoint, then SystemExit 75).
    """
    totals = RunTotals()
    metrics: dict[str, float | int] = {}
    for step in range(start + 1, args.steps + 1):
        loss, step_time = train_step(model, optimizer, data, args, step=step)
        metrics = step_metrics(model, args, loss=loss, step_time=step_time, totals=totals)
        end_of_step(model, data, args, step=step, metrics=metrics, reporter=reporter)
        ckpt.step_done(step)  # every --checkpoint-every steps; on SIGTERM: save, exit 75
    _finish(args, start=start, totals=totals, metrics=metrics, reporter=reporter)


def train_step(
    model: SynclaneDDP,
    optimizer: torch.optim.Optimizer,
    data: CharData,
    args: argparse.Namespace,
    *,
    step: int,
) -> tuple[torch.Tensor, float]:
    """Forward, backward and optimizer step on this rank's batch; return the loss and seconds."""
    t0 = time.perf_counter()
    x, y = data.batch(
        "train",
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        seed=_batch_seed(args.seed, dist.get_rank(), step),
    )
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss, time.perf_counter() - t0


def step_metrics(
    model: SynclaneDDP,
    args: argparse.Namespace,
    *,
    loss: torch.Tensor,
    step_time: float,
    totals: RunTotals,
) -> dict[str, float | int]:
    """The step's figures, with the session's communication figures (also added to totals)."""
    comm = model.session.pop_step_stats()
    totals.add(comm)
    samples_per_s = args.batch_size * dist.get_world_size() / step_time
    metrics: dict[str, float | int] = {
        "loss": loss.item(),
        "samples_per_s": samples_per_s,
        "tokens_per_s": samples_per_s * args.seq_len,
        "step_time_s": step_time,
        "comm_time_s": comm["comm_time_s"],
        "bytes_sent": int(comm["bytes_sent"]),
        **{k: comm[k] for k in REPORTED_FIGURES if k in comm},
    }
    if (alloc := model.session.allocation_bps()) is not None:
        metrics["allocation_bps"] = alloc
    return metrics


def end_of_step(
    model: SynclaneDDP,
    data: CharData,
    args: argparse.Namespace,
    *,
    step: int,
    metrics: dict[str, float | int],
    reporter: Reporter,
) -> None:
    """Bookkeeping after a step: final average, evaluation, report, progress.

    Adds ``val_loss`` to ``metrics`` on evaluation steps.
    """
    last = step == args.steps
    if last and args.sync not in (p.SYNC_FULL, p.SYNC_POWERSGD):
        model.session.synchronize()  # one final model: average the replicas
    if last or (args.eval_every and step % args.eval_every == 0):
        metrics["val_loss"] = evaluate(model.module, data, args)
    reporter.log(metrics, step=step)
    if dist.get_rank() == 0 and (step % args.log_every == 0 or last or "val_loss" in metrics):
        _print_progress(step, args.steps, metrics)


def _finish(
    args: argparse.Namespace,
    *,
    start: int,
    totals: RunTotals,
    metrics: dict[str, float | int],
    reporter: Reporter,
) -> None:
    """All steps ran: rank 0 writes the run's summary; every rank reports it."""
    world = dist.get_world_size()
    wall = time.perf_counter() - totals.started
    steps_run = args.steps - start
    summary = {
        "sync": args.sync,
        "world_size": world,
        "steps": steps_run,
        "wall_s": wall,
        "samples_per_s": steps_run * args.batch_size * world / wall if wall > 0 else 0.0,
        "bytes_per_step": totals.bytes_sent / max(1, steps_run),
        "comm_time_per_step_s": totals.comm_time_s / max(1, steps_run),
        "reissued": totals.reissued,
        "val_loss": metrics.get("val_loss"),
        "link_rate_bps": metrics.get("link_rate_bps"),
    }
    run_dir = Path(args.run_dir)
    if dist.get_rank() == 0 and steps_run > 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    reporter.event("finished", **summary)


def _batch_seed(seed: int, rank: int, step: int) -> int:
    return (seed * 1_000_003 + rank) * 1_000_033 + step


def _print_progress(step: int, steps: int, m: dict[str, float | int]) -> None:
    val = f" val {m['val_loss']:.4f}" if "val_loss" in m else ""
    alloc = f" alloc {m['allocation_bps'] / 1e6:.0f}Mb/s" if "allocation_bps" in m else ""
    drift = f" drift {m['drift']:.4f} H {m['sync_period']:.0f}" if "drift" in m else ""
    print(
        f"step {step}/{steps} loss {m['loss']:.4f}{val} {m['samples_per_s']:.0f} samples/s "
        f"step {m['step_time_s'] * 1e3:.1f}ms comm {m['comm_time_s'] * 1e3:.1f}ms{alloc}{drift}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
