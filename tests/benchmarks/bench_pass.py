"""Benchmark of the control plane's scheduling pass against the depth of the queue.

    python tests/benchmarks/bench_pass.py            # 1,000, 5,000 and 20,000 queued jobs
    python tests/benchmarks/bench_pass.py --quick    # 1,000 and 5,000

One process, a fresh SQLite database and a private Redis: 10 tenants of 4 slots each and a
queue of ``noop`` jobs (1 to 4 ranks) that grows to each depth. At each depth, after one pass
has settled the admissions and waiting reasons, the CPU time of:

- the snapshot a pass from scratch reads (``jobs.adapters.snapshot``: every queued job), and
  the core's decision from it (``scheduling.schedule``);
- a whole pass from scratch (``jobs.scheduler.schedule_pass`` with the process's kept queues
  forgotten first: both of the above, plus writing every reason and the allocations);
- a whole pass that keeps its queues (``jobs.queue_state``), as a worker's passes do: after one
  job was submitted (it waits: its tenant's quota is full), and after a running job ended
  (the next of its tenant is admitted).

Each figure is the best of three. Results go to ``bench-results/pass.json``.
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
    print(
        "| queued jobs | snapshot (ms) | decision from scratch (ms) | pass from scratch (ms) "
        "| kept queues, a job submitted (ms) | kept queues, a job ended (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['queued']:,} | {r['snapshot_ms']:.0f} | {r['decision_ms']:.0f} "
            f"| {r['pass_ms']:.0f} | {r['pass_submit_ms']:.1f} | {r['pass_end_ms']:.1f} |"
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
    from controlplane.jobs import adapters, queue_state
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
        pass_s = _cpu(schedule_pass, setup=queue_state.current().reset)
        schedule_pass()  # the kept queues are built again
        submit_s = _cpu(schedule_pass, setup=partial(_submit_one, tenants[0], queues[0]))
        end_s = _cpu(schedule_pass, setup=_end_one)
        queued = Job.objects.filter(status="queued").count()
        row = {
            "queued": queued,
            "snapshot_ms": snapshot_s * 1e3,
            "decision_ms": decision_s * 1e3,
            "pass_ms": pass_s * 1e3,
            "pass_submit_ms": submit_s * 1e3,
            "pass_end_ms": end_s * 1e3,
        }
        rows.append(row)
        print("  " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    return rows


def _submit_one(tenant: Any, queue: Any) -> None:
    from controlplane.jobs.models import Job

    Job.objects.create(
        tenant=tenant, queue=queue, name="one", workload="noop", world_size=1, steps=1
    )


def _end_one() -> None:
    from controlplane.jobs.models import Job

    job = Job.objects.filter(status="admitted").order_by("pk").first()
    assert job is not None, "no admitted job to end"
    Job.objects.filter(pk=job.pk).update(status="succeeded")


def _cpu(fn: Any, setup: Any = None) -> float:
    """CPU seconds of ``fn()`` (after ``setup()``, not counted), the best of three."""
    best = float("inf")
    for _ in range(3):
        if setup is not None:
            setup()
        began = time.process_time()
        fn()
        best = min(best, time.process_time() - began)
    return best


if __name__ == "__main__":
    sys.exit(main())
