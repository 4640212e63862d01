"""What the plugin costs where the link is not the limit: torch's DDP against ``wrap``.

    .venv/bin/python tests/benchmarks/bench_wrap.py            # 5 models, 3 blocks (~3 min)
    .venv/bin/python tests/benchmarks/bench_wrap.py --quick    # 2 models, 1 block

A user who wraps a model with ``sync="full"`` expects the step of plain
``DistributedDataParallel``: nothing paced (no emulated link, no allocation), the same
gradients. Each model of the sync benchmark's catalogue trains in a real 2-rank
``torchrun`` (gloo, loopback, one thread a rank), arm after arm in blocks (every arm once
per block, the order reversed every second block, so a drift of the machine's speed over
a block cancels out):

* ``ddp``: ``DistributedDataParallel(model)``, torch's defaults (25 MB buckets);
* ``full``: ``wrap(model, optimizer, sync="full")``, the runtime's defaults (DDP's own
  buckets, as ``ddp``);
* ``full-table1``: ``full`` with the agreed table after every step (``table_interval_s``
  0, the rule before; now after each 20 ms of agreed step time);
* ``full-1mb``: ``full`` with 1 MB buckets (``bucket_cap_mb``; the default before, and
  adaptive's);
* ``none``: ``wrap`` with no gradient communication at all (the floor: what the
  gradients' own transfer costs is ``ddp`` less this).

Per run, the slowest rank's mean step time over the steps after the first few. Rows
``{model, block, arm, steps, step_ms}`` go to ``bench-results/wrap.json``; the table gives
each arm's median step and its ratio to ``ddp`` (per block, then the median).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

import bench_sync  # noqa: E402  (the models, their batches and the ranks' environment)

# (arm, sync mode or "ddp", changes for the run: runtime module constants by their dotted
# names, RuntimeConfig fields by theirs)
ARMS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("ddp", "ddp", {}),
    ("full", "full", {}),
    ("full-table1", "full", {"table_interval_s": 0.0}),
    ("full-1mb", "full", {"bucket_cap_mb": 1.0}),
    ("none", "none", {}),
)
MODELS = ("tiny_gpt", "shapes_cnn", "topics_encoder", "zoo:rnn_lm", "zoo:bn_mlp")
SKIP = 5  # the first steps (DDP's set-up, the allocator's warm-up) are not timed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny_gpt and shapes_cnn, one block")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150, help="steps of each run")
    ap.add_argument("--out", default=str(REPO / "bench-results" / "wrap.json"))
    ap.add_argument("--rank-plan", help=argparse.SUPPRESS)  # set by the launcher for the ranks
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.blocks, args.steps = "tiny_gpt,shapes_cnn", 1, 80
    return args


# ================================================================ a rank


class _NoSession:
    """What the workloads' losses call on a wrapped model, for plain DDP (nothing to note)."""

    def note_loss(self, loss: Any) -> None:
        pass


def run_arm(wl: bench_sync.Workload, mode: str, fields: dict[str, Any], steps: int) -> float:
    """Train ``steps`` steps of ``wl`` under one arm; return the slowest rank's mean step (s)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from workers.runtime.config import RuntimeConfig
    from workers.runtime.session import wrap

    gc.collect()  # the previous run's DDP and groups, off the clock (see bench_sync.train_run)
    torch.manual_seed(0)
    net = wl.model()
    opt = torch.optim.AdamW(net.parameters(), lr=wl.lr, weight_decay=0.0)
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "ddp":
        model: Any = DistributedDataParallel(net)
        model.session = _NoSession()
    else:
        config = RuntimeConfig(sync=mode, rank=rank, world_size=world, probe_every=0, **fields)
        model = wrap(net, optimizer=opt, config=config)
    times = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        loss = wl.loss(model, 0, rank, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if mode != "ddp":
        model.session.close()
    mean = torch.tensor([statistics.fmean(times[SKIP:])], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    return float(mean)


def rank_main(plan: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    wl = bench_sync.workload(plan["model"])
    rows = []
    for block in range(plan["blocks"]):
        order = ARMS if block % 2 == 0 else tuple(reversed(ARMS))
        for arm, mode, changes in order:
            fields = {k: v for k, v in changes.items() if "." not in k}  # the rest: constants
            with bench_sync.constant_changes(changes):
                step_s = run_arm(wl, mode, fields, plan["steps"])
            rows.append(
                {"model": wl.name, "block": block, "arm": arm, "steps": plan["steps"],
                 "step_ms": round(step_s * 1e3, 3)}
            )  # fmt: skip
    if dist.get_rank() == 0:
        Path(plan["out"]).write_text(json.dumps(rows))
    dist.destroy_process_group()


# ================================================================ the driver


def launch(model: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-wrap-") as tmp:
        plan = {"model": model, "blocks": args.blocks, "steps": args.steps,
                "out": str(Path(tmp) / "rows.json")}  # fmt: skip
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
        cmd += ["--nproc-per-node", "2", __file__, "--rank-plan", json.dumps(plan)]
        proc = subprocess.run(
            cmd, env=bench_sync.rank_env(), capture_output=True, text=True, cwd=REPO, timeout=1200
        )
        if proc.returncode != 0:
            raise SystemExit(f"{model} failed:\n{proc.stderr[-4000:]}")
        rows: list[dict[str, Any]] = json.loads(Path(plan["out"]).read_text())
        return rows


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        "2 ranks, no link limit; per arm its median step (ms) and, per block, its ratio to "
        "ddp's step (median of the blocks; > 1: slower than torch's DDP)",
        f"{'model':<16}" + "".join(f"{arm:>20}" for arm, _, _ in ARMS),
    ]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ddp = {r["block"]: r["step_ms"] for r in mine if r["arm"] == "ddp"}
        cells = []
        for arm, _, _ in ARMS:
            runs = [r for r in mine if r["arm"] == arm]
            step = statistics.median(r["step_ms"] for r in runs)
            ratio = statistics.median(r["step_ms"] / ddp[r["block"]] for r in runs)
            cells.append(f"{step:>10.2f} ms {ratio:>5.2f}x")
        lines.append(f"{model:<16}" + "".join(f"{c:>20}" for c in cells))
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    if args.rank_plan:
        rank_main(json.loads(args.rank_plan))
        return 0
    started = time.perf_counter()
    rows = []
    for model in args.models.split(","):
        rows += launch(model, args)
        print(f"[{model}] done", flush=True)
    text = report(rows)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "report": text}, indent=1) + "\n")
    shown = Path(args.out).resolve()
    shown = shown.relative_to(REPO) if shown.is_relative_to(REPO) else shown
    print(f"{len(rows)} rows in {time.perf_counter() - started:.0f} s -> {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
