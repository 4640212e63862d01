"""What re-issuing late gradient chunks is worth when one rank's link blips.

    .venv/bin/python tests/benchmarks/bench_reissue.py            # 3 seeds (~3 min)
    .venv/bin/python tests/benchmarks/bench_reissue.py --quick    # 1 seed

Real ``torchrun`` runs of ``workers.workloads.tiny_gpt`` (full sync, 2 ranks, gloo, 1 Gbit/s
emulated link, jitter threshold 50 ms), side by side per seed:

* ``clean``: no fault;
* ``blip``: from step 20, every first attempt of a collective on rank 1 is 0.2 s late
  for ``--blip-steps`` steps (``blip=1``: a re-issued chunk goes through), once with
  re-issue (the default) and once without (``SYNCLANE_REISSUE_AFTER_S=0``);
* ``long blip``: the same for 20 steps, longer than the 8 degraded steps that escalate.

``lost_s``: the run's training wall time minus the clean run's of the same seed, i.e. what
the fault cost. A run that escalated (``LinkFailure``, exit 76 from the worker) has no wall
time; its row says at which step. Writes rows ``{case, reissue, seed, steps, completed,
escalated_at, wall_s, lost_s, reissued}`` to ``bench-results/reissue.json`` and prints a
table averaged over seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_sync import rank_env, save  # this directory is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[2]
BLIP = "rank=1,from_step=20,until_step={until},delay_s=0.2,blip=1"
THRESHOLD_S = "0.05"
LINK_MBPS = 1000.0


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one seed")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--blip-steps", type=int, default=6)
    ap.add_argument("--long-blip-steps", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "bench-results" / "reissue.json"))
    args = ap.parse_args()
    if args.quick:
        args.seeds = "0"
    return args


def run_one(*, seed: int, steps: int, fault: str | None, reissue: bool) -> dict[str, Any]:
    settings = {"SYNCLANE_JITTER_THRESHOLD_S": THRESHOLD_S}
    if fault is not None:
        settings["SYNCLANE_FAULT"] = fault
    if not reissue:
        settings["SYNCLANE_REISSUE_AFTER_S"] = "0"
    with tempfile.TemporaryDirectory(prefix="bench-reissue-") as tmp:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", "2", "-m", "workers.workloads.tiny_gpt",
            "--steps", str(steps), "--checkpoint-every", "0", "--eval-every", "0",
            "--log-every", str(steps), "--seed", str(seed), "--sync", "full", "--run-dir", tmp,
        ]  # fmt: skip
        proc = subprocess.run(
            cmd, env=rank_env(LINK_MBPS, **settings), capture_output=True, text=True,
            timeout=600, cwd=REPO,
        )  # fmt: skip
        summary_path, exit_path = Path(tmp) / "summary.json", Path(tmp) / "exit.json"
        if proc.returncode == 0 and summary_path.exists():
            summary = json.loads(summary_path.read_text())
            return {
                "completed": True,
                "escalated_at": None,
                "wall_s": round(summary["wall_s"], 3),
                "reissued": summary["reissued"],
            }
        if exit_path.exists() and "link failure" in json.loads(exit_path.read_text())["reason"]:
            return {
                "completed": False,
                "escalated_at": json.loads(exit_path.read_text())["step"],
                "wall_s": None,
                "reissued": None,
            }
        raise RuntimeError(f"seed {seed} fault {fault} failed:\n{proc.stderr[-3000:]}")


def table(rows: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["case"], row["reissue"]), []).append(row)
    lines = [
        f"{'case':<10} {'re-issue':<8} {'completed':>9} {'escalated at':>12} {'wall s':>7} "
        f"{'lost s':>7} {'re-issued':>9} {'seeds':>5}"
    ]
    for (case, reissue), group in groups.items():
        done = [r for r in group if r["completed"]]
        escalated = sorted({r["escalated_at"] for r in group if not r["completed"]})

        def mean(key: str, runs: list[dict[str, Any]] = done) -> str:
            return f"{statistics.mean(r[key] for r in runs):.2f}" if runs else "-"

        lines.append(
            f"{case:<10} {'on' if reissue else 'off':<8} {len(done):>4}/{len(group):<4} "
            f"{','.join(map(str, escalated)) or '-':>12} {mean('wall_s'):>7} {mean('lost_s'):>7} "
            f"{mean('reissued'):>9} {len(group):>5}"
        )
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    cases = {
        "clean": None,
        "blip": BLIP.format(until=20 + args.blip_steps),
        "long blip": BLIP.format(until=20 + args.long_blip_steps),
    }
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for seed in (int(s) for s in args.seeds.split(",")):
        clean_wall: float | None = None
        for case, fault in cases.items():
            for reissue in (True, False) if fault else (True,):
                result = run_one(seed=seed, steps=args.steps, fault=fault, reissue=reissue)
                if fault is None:
                    clean_wall = result["wall_s"]
                lost = None
                if result["wall_s"] is not None and clean_wall is not None:
                    lost = round(result["wall_s"] - clean_wall, 3)
                row = {"case": case, "reissue": reissue, "seed": seed, "steps": args.steps}
                row.update(result, lost_s=lost)
                rows.append(row)
                print(json.dumps(row), flush=True)
    save(rows, args.out, table(rows), started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
