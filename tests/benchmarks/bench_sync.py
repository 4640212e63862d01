"""Benchmark the sync strategies on tiny_gpt over an emulated slow link.

    .venv/bin/python tests/benchmarks/bench_sync.py            # full: 2 and 4 ranks, 100 Mbit/s
                                                               # and 1 Gbit/s, 3 seeds (~35 min)
    .venv/bin/python tests/benchmarks/bench_sync.py --quick    # 2 and 4 ranks, 100 Mbit/s, 1 seed (<5 min)

Each run is a real ``torchrun`` of ``workers.workloads.tiny_gpt`` (gloo, one thread per
rank) with ``SYNCLANE_LINK_MBPS`` set, so the runtime's throttle paces every rank's wire
bytes (ring all-reduce accounting, 2(n-1)/n * S) to the emulated link. Same step budget for
every strategy; ``none`` (no communication at all) is the ceiling. At 100 Mbit/s two
variants run too (``VARIANTS``): ``full-64k`` (full with adaptive's 64 KB buckets, so its
gradients also leave during backward) and ``adaptive-scored`` (nothing critical by name). Writes a list of rows
``{strategy, world_size, link_mbps, seed, steps, samples_per_s, val_loss, bytes_per_step,
busbw_utilisation}`` to ``bench-results/sync.json`` and prints a table averaged over seeds.

``busbw_utilisation``: wire bytes a rank sent over the run / (link rate x run wall time),
i.e. the share of the emulated link's capacity the strategy kept busy. The table's
``link ms`` is the link time one step's bytes need (bytes x 8 / rate): the communication
cost alone, which does not move with CPU load, unlike samples/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STRATEGIES = ("full", "adaptive", "powersgd", "localsgd", "none")
# Variants: a strategy with one setting changed, to show what a mechanism is worth.
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    # full with adaptive's small buckets: gradients leave while backward still computes.
    "full-64k": ("full", {"SYNCLANE_BUCKET_CAP_MB": "0.0625"}),
    # adaptive with no parameter critical by name: only score-promoted ones every step.
    "adaptive-scored": ("adaptive", {"SYNCLANE_CRITICAL": "(?!x)x"}),
}
ORDER = (*STRATEGIES[:2], *VARIANTS, *STRATEGIES[2:])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="2 and 4 ranks, 100 Mbit/s, 1 seed, 150 steps"
    )
    ap.add_argument("--world-sizes", default="2,4")
    ap.add_argument("--links", default="100,1000", help="emulated link rates in Mbit/s")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}; '' for none"
    )
    ap.add_argument("--variant-links", default="100", help="links at which variants run")
    ap.add_argument("--out", default=str(REPO / "bench-results" / "sync.json"))
    ap.add_argument(
        "--report", metavar="JSON", help="only print the table of an earlier run's rows"
    )
    args = ap.parse_args()
    if args.quick:
        args.links, args.seeds, args.steps, args.variants = "100", "0", 150, ""
    return args


def rank_env(link_mbps: float, **settings: str) -> dict[str, str]:
    """The environment of a benchmarked torchrun: one thread per rank on loopback, the
    emulated link, probes off (every strategy pays the same: nothing), our settings only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLANE_")}
    env.update(
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        MASTER_ADDR="127.0.0.1",
        SYNCLANE_LINK_MBPS=str(link_mbps),
        SYNCLANE_PROBE_EVERY="0",
        PYTHONPATH=str(REPO),
        **settings,
    )
    return env


def run_one(*, strategy: str, world: int, link: float, seed: int, steps: int) -> dict[str, Any]:
    sync, settings = VARIANTS.get(strategy, (strategy, {}))
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        env = rank_env(link, **settings)
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(world), "-m", "workers.workloads.tiny_gpt",
            "--steps", str(steps), "--checkpoint-every", "0", "--eval-every", "0",
            "--log-every", str(steps), "--seed", str(seed), "--sync", sync, "--run-dir", tmp,
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{strategy} w{world} {link}Mb/s seed {seed} failed:\n{proc.stderr[-3000:]}"
            )
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    wire_bits = summary["bytes_per_step"] * summary["steps"] * 8
    return {
        "strategy": strategy,
        "world_size": world,
        "link_mbps": link,
        "seed": seed,
        "steps": summary["steps"],
        "samples_per_s": round(summary["samples_per_s"], 2),
        "val_loss": round(summary["val_loss"], 5),
        "bytes_per_step": round(summary["bytes_per_step"], 1),
        "busbw_utilisation": round(wire_bits / (link * 1e6 * summary["wall_s"]), 4),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Return a text table: one line per (world, link, strategy), means over seeds."""
    groups: dict[tuple[int, float, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["world_size"], row["link_mbps"], row["strategy"]), []).append(row)
    lines = [
        f"{'ranks':>5} {'link':>6} {'strategy':<9} {'samples/s':>10} {'x full':>7} {'% ceil':>7} "
        f"{'val_loss':>9} {'gap':>8} {'KB/step':>8} {'link ms':>8} {'busbw':>6} {'seeds':>5}"
    ]
    for (world, link, strategy), group in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], ORDER.index(kv[0][2]))
    ):
        sps = statistics.mean(r["samples_per_s"] for r in group)
        loss = statistics.mean(r["val_loss"] for r in group)
        full = groups.get((world, link, "full"))
        ceil = groups.get((world, link, "none"))
        full_sps = statistics.mean(r["samples_per_s"] for r in full) if full else float("nan")
        full_loss = statistics.mean(r["val_loss"] for r in full) if full else float("nan")
        ceil_sps = statistics.mean(r["samples_per_s"] for r in ceil) if ceil else float("nan")
        lines.append(
            f"{world:>5} {link:>6.0f} {strategy:<9} {sps:>10.1f} {sps / full_sps:>7.2f} {100 * sps / ceil_sps:>6.1f}% "
            f"{loss:>9.4f} {100 * (loss - full_loss) / full_loss:>+7.2f}% "
            f"{statistics.mean(r['bytes_per_step'] for r in group) / 1024:>8.1f} "
            f"{statistics.mean(r['bytes_per_step'] for r in group) * 8 / (link * 1e3):>8.1f} "
            f"{statistics.mean(r['busbw_utilisation'] for r in group):>6.2f} {len(group):>5}"
        )
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    if args.report:
        print(table(json.loads(Path(args.report).read_text())))
        return 0
    worlds = [int(w) for w in args.world_sizes.split(",")]
    links = [float(x) for x in args.links.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    strategies = args.strategies.split(",")
    variants = [v for v in args.variants.split(",") if v]
    variant_links = {float(x) for x in args.variant_links.split(",") if x}
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    # Strategies innermost: on a shared machine, background load then spreads over all of them.
    for world in worlds:
        for link in links:
            for seed in seeds:
                runs = strategies + (variants if link in variant_links else [])
                for strategy in runs:
                    row = run_one(
                        strategy=strategy, world=world, link=link, seed=seed, steps=args.steps
                    )
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    save(rows, args.out, table(rows), started=started)
    return 0


def save(rows: list[dict[str, Any]], out: str, report: str, *, started: float) -> None:
    """Write ``rows`` as JSON to ``out`` and print ``report`` with the run count and time."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\n{report}\n\n{len(rows)} runs in {time.monotonic() - started:.0f} s -> {path}")


if __name__ == "__main__":
    sys.exit(main())
