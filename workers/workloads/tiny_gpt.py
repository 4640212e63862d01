"""tiny_gpt: a small character-level GPT, trained data-parallel with the Synclane runtime.

    torchrun --standalone --nnodes 1 --nproc-per-node 2 -m workers.workloads.tiny_gpt \
        --steps 200 --checkpoint-every 50 --run-dir run/demo [--sync full]

Trains on the Jargon File lexicon shipped in ``workers/workloads/data`` (public domain; see
the README there): first 90% of characters for training, last 10% held out for validation.
It uses the runtime exactly as a user script would: ``wrap()`` the model, ``Reporter.from_env()``
for telemetry. Checkpoints go to ``--run-dir`` atomically; a restart resumes from the newest.

Exit status: 0 when all steps ran; ``EXIT_STOPPED_AFTER_CHECKPOINT`` (75) when SIGTERM/SIGINT
stopped it after writing a checkpoint (rank 0 also writes ``RUN_DIR/exit.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.reporter import AllocationClient, Reporter
from workers.runtime.wrap import LinkFailure, SynclaneDDP, wrap
from workers.workloads.checkpoints import latest_checkpoint, load_checkpoint, save_checkpoint

DATA_FILE = Path(__file__).with_name("data") / "jargon_lexicon_a_to_e.txt"
VAL_FRACTION = 0.1
EVAL_BATCHES = 8
SUMMARY_FILE = "summary.json"  # rank 0 writes it at the end of a run that completed
# Figures from the runtime's session that go into each metrics message when present.
REPORTED_FIGURES = (
    "exposed_comm_s",
    "busbw_bps",
    "sync_delay_s",
    "jitter_s",
    "chunk_bytes",
    "reissued",
    "link_rate_bps",
    "drift",
    "sync_period",
    "grad_norm_var",
    "loss_descent_rate",
    "critical_fraction",
    "sync_enhanced",
    "fast_link",
)


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


class StopFlag:
    """Set by SIGTERM/SIGINT; the loop checks it between steps (never mid-collective)."""

    def __init__(self) -> None:
        self.signum = 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum

    def agreed(self) -> bool:
        """Return True on every rank once any rank was signalled (one tiny MAX all-reduce).

        Ranks get the signal at slightly different moments; agreeing first keeps them from
        leaving a collective half-joined.
        """
        flag = torch.tensor([1 if self.signum else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


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


def train_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, step: int, args: argparse.Namespace
) -> dict[str, object]:
    return {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "args": vars(args),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    stop = StopFlag()
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
    start = resume(gpt, optimizer, run_dir, args, reporter)
    model = wrap(gpt, optimizer=optimizer, config=cfg, reporter=reporter, allocation=allocation)
    model.session.set_step(start)
    if rank == 0:
        n_params = sum(q.numel() for q in gpt.parameters())
        print(
            f"tiny_gpt: {n_params} params, world {world}, sync {args.sync}, steps {start}->{args.steps}",
            flush=True,
        )

    try:
        code = train(model, optimizer, data, args, start=start, stop=stop, reporter=reporter)
        reason = f"signal {stop.signum}"
    except LinkFailure as exc:
        # Every rank raises at the same step, after the optimizer step: the state is whole.
        _checkpoint(model, optimizer, model.session.step, args)
        reporter.event(
            "link_failed", step=model.session.step, detail=str(exc), exit_code=exc.exit_code
        )
        code, reason = exc.exit_code, f"link failure: {exc}"
        if rank == 0:
            print(
                f"tiny_gpt: {reason}; checkpoint written at step {model.session.step}", flush=True
            )
    if rank == 0 and code != p.EXIT_OK:
        exit_info = {"code": code, "reason": reason, "step": model.session.step}
        (run_dir / p.EXIT_FILE).write_text(json.dumps(exit_info))
    model.session.close()  # also stops the allocation client
    reporter.close()
    dist.destroy_process_group()
    return code


def resume(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    run_dir: Path,
    args: argparse.Namespace,
    reporter: Reporter,
) -> int:
    """Load the newest checkpoint in ``run_dir`` into model and optimizer; return its step (0 if none)."""
    path = None if args.no_resume else latest_checkpoint(run_dir)
    if path is None:
        return 0
    state = load_checkpoint(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    step = int(state["step"])
    reporter.event("resumed", resumed_from_step=step, checkpoint=path.name)
    if dist.get_rank() == 0:
        print(f"tiny_gpt: resumed_from_step={step} ({path.name})", flush=True)
    return step


def train(
    model: SynclaneDDP,
    optimizer: torch.optim.Optimizer,
    data: CharData,
    args: argparse.Namespace,
    *,
    start: int,
    stop: StopFlag,
    reporter: Reporter,
) -> int:
    """Run steps ``start+1 .. args.steps``; return the process exit code."""
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = Path(args.run_dir)
    saved_step = start
    run_started, total_bytes, total_comm, reissued = time.perf_counter(), 0, 0.0, 0
    metrics: dict[str, float | int] = {}
    for step in range(start + 1, args.steps + 1):
        t0 = time.perf_counter()
        x, y = data.batch(
            "train",
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            seed=_batch_seed(args.seed, rank, step),
        )
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step_time = time.perf_counter() - t0
        comm = model.session.pop_step_stats()
        total_bytes += int(comm["bytes_sent"])
        total_comm += comm["comm_time_s"]
        reissued += int(comm.get("reissued", 0))
        last = step == args.steps
        samples_per_s = args.batch_size * world / step_time
        metrics = {
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
        if last and args.sync not in (p.SYNC_FULL, p.SYNC_POWERSGD):
            model.session.synchronize()  # one final model: average the replicas
        if last or (args.eval_every and step % args.eval_every == 0):
            metrics["val_loss"] = evaluate(model.module, data, args)
        reporter.log(metrics, step=step)
        if rank == 0 and (
            step % args.log_every == 0 or step == args.steps or "val_loss" in metrics
        ):
            _print_progress(step, args.steps, metrics)
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            _checkpoint(model, optimizer, step, args)
            saved_step = step
        if stop.agreed():
            if saved_step != step:
                _checkpoint(model, optimizer, step, args)
            reporter.event(
                "stopped", step=step, signal=stop.signum, exit_code=p.EXIT_STOPPED_AFTER_CHECKPOINT
            )
            if rank == 0:
                print(
                    f"tiny_gpt: stopped by signal {stop.signum} at step {step}; checkpoint in {run_dir}",
                    flush=True,
                )
            return p.EXIT_STOPPED_AFTER_CHECKPOINT
    wall = time.perf_counter() - run_started
    steps_run = args.steps - start
    summary = {
        "sync": args.sync,
        "world_size": world,
        "steps": steps_run,
        "wall_s": wall,
        "samples_per_s": steps_run * args.batch_size * world / wall if wall > 0 else 0.0,
        "bytes_per_step": total_bytes / max(1, steps_run),
        "comm_time_per_step_s": total_comm / max(1, steps_run),
        "reissued": reissued,  # gradient chunks re-issued on a degraded link
        "val_loss": metrics.get("val_loss"),
        "link_rate_bps": metrics.get("link_rate_bps"),
    }
    if rank == 0 and steps_run > 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    reporter.event("finished", **summary)
    return p.EXIT_OK


def _batch_seed(seed: int, rank: int, step: int) -> int:
    return (seed * 1_000_003 + rank) * 1_000_033 + step


def _checkpoint(
    model: SynclaneDDP, optimizer: torch.optim.Optimizer, step: int, args: argparse.Namespace
) -> None:
    """Rank 0 writes; everyone waits so no rank races ahead of a half-written checkpoint."""
    if dist.get_rank() == 0:
        save_checkpoint(Path(args.run_dir), step, train_state(model.module, optimizer, step, args))
    dist.barrier()


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
