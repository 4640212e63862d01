"""What a meeting of the ranks costs: small gloo all-reduces between two processes.

    .venv/bin/python tests/benchmarks/bench_meeting.py            # 3 runs (~1 min)
    .venv/bin/python tests/benchmarks/bench_meeting.py --quick    # 1 run

Each run is a real 2-rank ``torchrun`` (gloo, loopback, one thread a rank) that times
back-to-back all-reduces on a process group of their own, as the runtime issues them: per
collective, the wall time and each rank's CPU time (user and kernel, from getrusage, all
of the rank's threads: gloo's included) and context switches. The arms are what adaptive
sends at a step whose critical average starts, for a small model (shapes_cnn: ~400 bytes
of critical parameters in bf16) with the agreed table (2 ranks x 6 float64 cells):

* ``table``: the table's all-reduce alone (96 bytes);
* ``alone``: the critical average, then the table as a second all-reduce;
* ``rides``: one all-reduce of the average with the table in three bf16 parts appended
  (``table.TableRow.ride``);
* ``64 KB``: a larger payload, for scale.

Nothing is paced: this is the transport's own cost, which the emulated link adds to.
Writes rows ``{run, arm, payload_bytes, collectives, wall_us, user_us, sys_us,
switches}`` (per step of the arm, the mean of the two ranks) to
``bench-results/meeting.json`` and prints a table of the runs' medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# (arm, the payloads of the collectives a step of it issues, in bytes)
ARMS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("table", (96,)),
    ("alone", (400, 96)),
    ("rides", (400 + 3 * 2 * 12,)),
    ("64 KB", (65536,)),
)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one run, fewer steps")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000, help="steps of each arm per run")
    ap.add_argument("--out", default=str(REPO / "bench-results" / "meeting.json"))
    ap.add_argument("--rank-out", help=argparse.SUPPRESS)  # set when run as a torchrun rank
    args = ap.parse_args()
    if args.quick:
        args.runs, args.steps = 1, 500
    return args


# ================================================================ a rank


def rank_main(out: str, steps: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    group = dist.new_group(backend="gloo")  # the runtime's collectives have groups of their own
    rows = []
    for arm, payloads in ARMS:
        tensors = [torch.zeros(size // 2, dtype=torch.bfloat16) for size in payloads]
        for t in tensors:  # one warm-up step
            dist.all_reduce(t, group=group)
        dist.barrier()
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(steps):
            for t in tensors:
                dist.all_reduce(t, group=group)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        switches = (after.ru_nvcsw + after.ru_nivcsw) - (before.ru_nvcsw + before.ru_nivcsw)
        rows.append(
            {
                "arm": arm,
                "payload_bytes": sum(payloads),
                "collectives": len(payloads),
                "wall_us": wall / steps * 1e6,
                "user_us": (after.ru_utime - before.ru_utime) / steps * 1e6,
                "sys_us": (after.ru_stime - before.ru_stime) / steps * 1e6,
                "switches": switches / steps,
            }
        )
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rows)
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


# ================================================================ the driver


def one_run(run: int, steps: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-meeting-") as tmp:
        out = Path(tmp) / "ranks.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLANE_")}
        env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
        cmd += ["--nproc-per-node", "2", __file__, "--rank-out", str(out), "--steps", str(steps)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(proc.stdout[-2000:] + proc.stderr[-4000:])
        ranks = json.loads(out.read_text())
    rows = []
    for i, (arm, _) in enumerate(ARMS):
        per_rank = [rank_rows[i] for rank_rows in ranks]
        row: dict[str, Any] = {"run": run, "arm": arm}
        for key in ("payload_bytes", "collectives"):
            row[key] = per_rank[0][key]
        for key in ("wall_us", "user_us", "sys_us", "switches"):
            row[key] = round(statistics.fmean(r[key] for r in per_rank), 1)
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'arm':>7} {'bytes':>6} {'colls':>5} {'wall us':>8} {'user us':>8} {'sys us':>7} "
        f"{'CPU us':>7} {'switches':>8}"
    )
    lines = [head]
    for arm, _ in ARMS:
        mine = [r for r in rows if r["arm"] == arm]

        def median(key: str, mine: list[dict[str, Any]] = mine) -> float:
            return statistics.median(r[key] for r in mine)

        lines.append(
            f"{arm:>7} {mine[0]['payload_bytes']:>6} {mine[0]['collectives']:>5} "
            f"{median('wall_us'):>8.0f} {median('user_us'):>8.0f} {median('sys_us'):>7.0f} "
            f"{median('user_us') + median('sys_us'):>7.0f} {median('switches'):>8.1f}"
        )
    alone = statistics.median(r["wall_us"] for r in rows if r["arm"] == "alone")
    rides = statistics.median(r["wall_us"] for r in rows if r["arm"] == "rides")
    return (
        "per step of each arm, 2 ranks (the mean of the ranks; the runs' median)\n"
        + "\n".join(lines)
        + f"\nrides / alone, wall: {rides / alone:.2f}"
    )


def main() -> int:
    args = parse_args()
    if args.rank_out:
        rank_main(args.rank_out, args.steps)
        return 0
    from bench_sync import save  # this directory is on sys.path when run as a script

    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        rows += one_run(run, args.steps)
        print(f"run {run + 1}/{args.runs} done", flush=True)
    save(rows, args.out, report(rows), started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
