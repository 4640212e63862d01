"""Benchmark of the control plane's scheduling pass against the depth of the queue.

    python tests/benchmarks/bench_pass.py            # 1,000, 5,000 and 20,000 queued jobs
    python tests/benchmarks/bench_pass.py --quick    # 1,000 and 5,000

One process, a fresh SQLite database and a private Redis: 10 tenants of 4 slots each and a
queue of ``noop`` jobs (1 to 4 ranks) that grows to each depth. At each depth, after one pass
has settled the admissions and waiting reasons, the CPU time of: the snapshot the pass reads
(``jobs.adapters.snapshot``: every queued job), the core's decision from that snapshot
(``scheduling.schedule``: from scratch), and a whole pass (``jobs.scheduler.schedule_pass``:
both, plus writing reasons and allocations). The pure core keeps a ``Queues`` between decisions
and looks only at what changed (``bench_scheduler.py``); the control plane's pass does not yet,
so its cost grows with the queue. Results go to ``bench-results/pass.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controlplane import devstack  # noqa: E402

OUT = ROOT / "bench-results" / "pass.json"
TENANTS = 10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="1,000 and 5,000 queued jobs")
    args = ap.parse_args()
    depths = [1_000, 5_000] if args.quick else [1_000, 5_000, 20_000]
    work = Path(tempfile.mkdtemp(prefix="bench-pass-"))
    stack = devstack.Stack()
    try:
        _setup(stack, work)
        rows = measure(depths)
    finally:
        stack.stop()
    print()
    print("| queued jobs | snapshot (ms) | decision from scratch (ms) | whole pass (ms) |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['queued']:,} | {r['snapshot_ms']:.0f} | {r['decision_ms']:.0f} "
            f"| {r['pass_ms']:.0f} |"
        )
    OUT.parent.mkdir(exist_ok=True)
    command = "python tests/benchmarks/bench_pass.py" + (" --quick" if args.quick else "")
    report = {"command": command, "python": platform.python_version(), "rows": rows}
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


def _setup(stack: devstack.Stack, work: Path) -> None:
    """A private Redis and a migrated SQLite database for this process's Django."""
    redis_url = devstack.start_private_redis(stack, work, log=work / "redis.log")
    os.environ.update(
        {
            "REDIS_URL": redis_url,
            "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
            "SYNCLANE_RUN_DIR": str(work),
            "SYNCLANE_JOBS_DIR": str(work / "jobs"),
            "SYNCLANE_LOG_LEVEL": "ERROR",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        }
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def measure(depths: list[int]) -> list[dict[str, Any]]:
    """Grow one queue to each depth; CPU of the snapshot, the decision and a whole pass."""
    from django.utils import timezone

    from controlplane import scheduling as core
    from controlplane.jobs import adapters
    from controlplane.jobs.models import Job, Queue
    from controlplane.jobs.scheduler import schedule_pass
    from controlplane.tenancy.models import Tenant

    tenants = [
        Tenant.objects.create(
            slug=f"t{i}", name=f"T{i}", slot_quota=4, max_running_jobs=4, bandwidth_quota_mbps=100
        )
        for i in range(TENANTS)
    ]
    queues = [Queue.objects.get_or_create(tenant=t, name="default")[0] for t in tenants]
    rows, made = [], 0
    for depth in depths:
        Job.objects.bulk_create(
            Job(
                tenant=tenants[i % TENANTS],
                queue=queues[i % TENANTS],
                name=f"n{i}",
                workload="noop",
                world_size=1 + i % 4,
                steps=1,
                status="queued",
            )
            for i in range(made, depth)
        )
        made = depth
        schedule_pass()  # admissions and reasons settle; the measured pass changes little
        locked = list(Tenant.objects.order_by("pk"))
        snapshot_s = _cpu(partial(adapters.snapshot, locked))
        snap = adapters.snapshot(locked)
        decision_s = _cpu(lambda s=snap: core.schedule(s, timezone.now().timestamp()))
        pass_s = _cpu(schedule_pass)
        queued = Job.objects.filter(status="queued").count()
        rows.append(
            {
                "queued": queued,
                "snapshot_ms": snapshot_s * 1e3,
                "decision_ms": decision_s * 1e3,
                "pass_ms": pass_s * 1e3,
            }
        )
        print(
            f"  {queued} queued: snapshot {snapshot_s * 1e3:.0f} ms, decision "
            f"{decision_s * 1e3:.0f} ms, pass {pass_s * 1e3:.0f} ms",
            flush=True,
        )
    return rows


def _cpu(fn: Any) -> float:
    """CPU seconds of ``fn()``, the best of three."""
    best = float("inf")
    for _ in range(3):
        began = time.process_time()
        fn()
        best = min(best, time.process_time() - began)
    return best


if __name__ == "__main__":
    sys.exit(main())
