"""Benchmark of fault recovery: kill -9 a process under a running job.

    python tests/benchmarks/bench_faults.py                    # 3 runs per fault
    python tests/benchmarks/bench_faults.py --quick            # 1 run per fault
    python tests/benchmarks/bench_faults.py --faults rank,redis --runs 5

Everything is real (``tests/faults.FaultStack``): a redis-server, a Celery worker with
beat, the ingest, daphne, 2-rank ``tiny_gpt`` runs under torchrun, and a websocket client
that reconnects like the job page. Each run submits one job, waits until it is past two
checkpoints, injects one fault, and follows the job to its end. Per run:

- ``recovery_s``: from the injection (rank, worker) or from the service's return (Redis,
  ASGI: ``outage_s`` later) until the websocket client receives a metrics message the run
  stamped after that moment, i.e. until the job is seen training again. After a restart
  of the run it must also follow the run's ``resumed`` event.
- ``steps_lost``: steps done again: the last step the stopped run reported minus the
  checkpoint step the new run resumed from (0 when the run never restarted).
- ``lost``: the job is gone, duplicated, or ended short of its steps; ``failed``: it did
  not succeed. The target is no run lost or failed by these platform faults, recovery
  within 60 s, and at most one checkpoint interval of steps lost.

Writes bench-results/faults.json (one row per run) and prints a table per fault.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import faults as inject  # noqa: E402
from tests.benchmarks.bench_sync import save  # noqa: E402
from tests.faults import FaultStack, Received, ReconnectingListener, wait_until  # noqa: E402

STEPS = 240
CHECKPOINT_EVERY = 20
INJECT_AFTER_STEP = 2 * CHECKPOINT_EVERY + CHECKPOINT_EVERY // 2  # mid-way between checkpoints
OUTAGE_S = 3.0  # how long a killed service stays down before it is started again
RECOVERY_TIMEOUT_S = 180.0


@dataclass
class Injection:
    at: float  # wall clock (time.time()) of the kill
    measure_from: float  # wall clock from which recovery is timed
    outage_s: float = 0.0
    # The run itself is stopped and must resume from a checkpoint (rank, worker): only
    # metrics after its ``resumed`` event count (a rank may log one last step meanwhile).
    resumes: bool = False


# --- the faults: each kills something for real; the platform brings it back -------------


def kill_rank(stack: FaultStack, job: dict[str, Any]) -> Injection:
    """kill -9 rank 1; the supervisor restarts the run from its last checkpoint."""
    at = time.time()
    inject.kill_rank(job["placement"]["pgid"], rank=1)
    return Injection(at=at, measure_from=at, resumes=True)


def kill_worker(stack: FaultStack, job: dict[str, Any]) -> Injection:
    """kill -9 the Celery worker and its pool; the devstack restarts it, and the restarted
    worker takes the run over (or requeues it from its checkpoint)."""
    at = time.time()
    inject.kill_worker(stack.stack)
    return Injection(at=at, measure_from=at, resumes=True)


def kill_redis(stack: FaultStack, job: dict[str, Any]) -> Injection:
    """kill -9 Redis; start an empty one on the same port after OUTAGE_S."""
    at = time.time()
    stack.redis.kill()
    time.sleep(OUTAGE_S)
    stack.redis.restart()
    back = time.time()
    return Injection(at=at, measure_from=back, outage_s=back - at)


def kill_asgi(stack: FaultStack, job: dict[str, Any]) -> Injection:
    """kill -9 daphne; the devstack's restarter starts it again on its port."""
    at = time.time()
    stack.kill("asgi")
    stack.wait_for_asgi()
    back = time.time()
    return Injection(at=at, measure_from=back, outage_s=back - at)


FAULTS: dict[str, Callable[[FaultStack, dict[str, Any]], Injection]] = {
    "rank": kill_rank,
    "worker": kill_worker,
    "redis": kill_redis,
    "asgi": kill_asgi,
}


# --- one run ---------------------------------------------------------------------------


def run_once(faults: FaultStack, fault: str, run: int, token: str, cookie: str) -> dict[str, Any]:
    """Submit a job, inject ``fault`` past two checkpoints, follow it to the end; one row."""
    name = f"bench-{fault}-{run}-{int(time.time())}"
    body = {
        "tenant": "vision",
        "name": name,
        "workload": "tiny_gpt",
        "world_size": 2,
        "steps": STEPS,
        "sync": "full",
        "hyperparameters": {"checkpoint_every": CHECKPOINT_EVERY},
    }
    status, job, _ = faults.call("POST", "/api/v1/jobs/", body, token=token)
    assert status == 201, job
    listener = ReconnectingListener(faults, job["id"], cookie)
    listener.start()
    try:
        wait_until(
            lambda: max_step(listener.metrics()) >= INJECT_AFTER_STEP,
            timeout=300,
            what=f"job {job['id']} past step {INJECT_AFTER_STEP}",
        )
        job = faults.job(job["id"], token)  # placement of the running attempt
        injection = FAULTS[fault](faults, job)
        recovered = _recovered_at(listener, injection)
        end = faults.wait_for_status(
            job["id"], token, {"succeeded", "failed", "cancelled"}, timeout=900
        )
    finally:
        listener.stop()
    return _row(fault, run, injection, recovered, listener.received, end, faults, token, name)


def _recovered_at(listener: ReconnectingListener, injection: Injection) -> Received | None:
    """The first metrics message showing the job training again (None: not within timeout)."""

    def training_again() -> Received | None:
        received = list(listener.received)
        resumed = [
            i
            for i, r in enumerate(received)
            if r.message["type"] == "event"
            and r.message["data"].get("kind") == "resumed"
            and r.message["data"]["ts"] > injection.at
        ]
        if injection.resumes and not resumed:
            return None
        start = resumed[0] + 1 if resumed else 0
        for r in received[start:]:
            if r.message["type"] == "metrics" and r.message["data"]["ts"] > injection.measure_from:
                return r
        return None

    try:
        return wait_until(training_again, timeout=RECOVERY_TIMEOUT_S, what="training again")
    except AssertionError:
        return None


def _row(
    fault: str,
    run: int,
    injection: Injection,
    recovered: Received | None,
    received: list[Received],
    end: dict[str, Any],
    faults: FaultStack,
    token: str,
    name: str,
) -> dict[str, Any]:
    resumed = [
        r.message["data"]
        for r in received
        if r.message["type"] == "event"
        and r.message["data"].get("kind") == "resumed"
        and r.message["data"]["ts"] > injection.at
    ]
    # The old run's last step: it may train on after the injection (a lost worker's run
    # does until its new supervisor stops it at a checkpoint).
    stopped_by = resumed[0]["ts"] if resumed else injection.at
    before = [
        r.message["data"]["step"]
        for r in received
        if r.message["type"] == "metrics" and r.message["data"]["ts"] <= stopped_by
    ]
    resumed_from = resumed[0].get("resumed_from_step", 0) if resumed else None
    steps_lost = max(0, max(before, default=0) - resumed_from) if resumed_from is not None else 0
    status, listed, _ = faults.call("GET", f"/api/v1/jobs/?name={name}", token=token)
    copies = [j for j in listed["results"] if j["name"] == name] if status == 200 else []
    recovery_s = None if recovered is None else recovered.wall - injection.measure_from
    return {
        "fault": fault,
        "run": run,
        "recovery_s": None if recovery_s is None else round(recovery_s, 2),
        "steps_lost": steps_lost,
        "lost": len(copies) != 1 or end.get("last_step") != STEPS,
        "failed": end["status"] != "succeeded",
        "outage_s": round(injection.outage_s, 2),
        "restarts": end.get("restarts"),
        "status": end["status"],
        "checkpoint_every": CHECKPOINT_EVERY,
    }


def max_step(received: list[Received]) -> int:
    return max((r.message["data"].get("step", 0) for r in received), default=0)


# --- report ------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: one line per fault (median and worst recovery, steps lost, fates)."""
    lines = [
        "| fault | runs | recovery median (s) | recovery max (s) | steps lost max | "
        "lost | failed | outage (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fault in dict.fromkeys(r["fault"] for r in rows):
        mine = [r for r in rows if r["fault"] == fault]
        times = sorted(r["recovery_s"] for r in mine if r["recovery_s"] is not None)
        never = len(mine) - len(times)
        median = f"{times[len(times) // 2]:.1f}" if times else "-"
        worst = f"{times[-1]:.1f}" if times else "-"
        if never:
            worst += f" ({never} never)"
        lines.append(
            f"| {fault} | {len(mine)} | {median} | {worst} | "
            f"{max(r['steps_lost'] for r in mine)} | {sum(r['lost'] for r in mine)} | "
            f"{sum(r['failed'] for r in mine)} | {max(r['outage_s'] for r in mine):.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    faults_wanted = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in faults_wanted if f not in FAULTS]
    if unknown:
        print(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}", file=sys.stderr)
        return 2
    runs = args.runs or (1 if args.quick else 3)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    faults = FaultStack.start(work, SYNCLANE_CHECKPOINT_EVERY=str(CHECKPOINT_EVERY))
    rows: list[dict[str, Any]] = []
    try:
        token, cookie = faults.token(), faults.session_cookie()
        for run in range(runs):  # round-robin: an interrupted run still covers every fault
            for fault in faults_wanted:
                row = run_once(faults, fault, run, token, cookie)
                rows.append(row)
                print(row, flush=True)
                Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")  # so far
    finally:
        faults.stop()
    save(rows, args.out, table(rows), started=started)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one run per fault")
    p.add_argument("--runs", type=int, default=None, help="runs per fault (default 3)")
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, of the default")
    p.add_argument("--out", default=str(ROOT / "bench-results" / "faults.json"))
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
