"""Benchmark of the real admission path: API, database, Celery and supervisor, end to end.

    python tests/benchmarks/bench_admission.py            # SQLite and PostgreSQL, 1,000 jobs,
                                                          # one per request and 50 per request
    python tests/benchmarks/bench_admission.py --quick    # 200 jobs each
    python tests/benchmarks/bench_admission.py --jobs 3000 --databases postgresql --batch 1

For each database, from nothing: a private Redis; a fresh database (a SQLite file, or a
PostgreSQL database that the benchmark creates on the local server at 127.0.0.1:5432 and drops
at the end); migrations; one tenant whose quota is the whole cluster (``--slots`` slots) and a
member with an API token; a Celery worker (with beat) that runs the scheduling passes and
supervises the runs, and daphne serving the API. Then ``--clients`` threads POST ``--jobs``
jobs of the built-in ``noop`` workload (one empty step, world size 1) to ``/api/v1/jobs/`` as
fast as they are accepted (one tenant's queue, hundreds deep), and the benchmark waits until
every job has succeeded. With ``--batch K`` (K > 1) each request submits K jobs at once to
``/api/v1/jobs/batch/`` (a sweep); each batch size is a row of its own.

Figures, from the jobs' own timestamps in the database:

- ``submits_per_s``: jobs accepted (201) per second of the submission window;
- ``admissions_per_s``: admissions per second between the first and the last admission;
- ``submit_to_running_p50_s`` / ``_p99_s``: a job's ``started_at - created_at``;
- CPU seconds of daphne and of the Celery worker (with its children: the supervised runs)
  during the run, to say what limits the rate.

Results go to ``bench-results/admission.json`` (rows ``{database, jobs, submits_per_s,
admissions_per_s, submit_to_running_p50_s, submit_to_running_p99_s}`` plus the CPU figures);
``bench_scheduler.py`` reads the PostgreSQL admission rate to charge each admission of its
Kueue replay the real path's cost. Wall-clock figures: on a shared machine, other load slows them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controlplane import devstack  # noqa: E402

OUT = ROOT / "bench-results" / "admission.json"
POSTGRES_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
DATABASES = ("postgresql", "sqlite")
PASSWORD = "bench-" + uuid.uuid4().hex


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        row = measure(
            args.child, jobs=args.jobs, clients=args.clients, slots=args.slots, batch=args.batch[0]
        )
        Path(args.row_out).write_text(json.dumps(row))
        return 0
    jobs = args.jobs or (200 if args.quick else 1000)
    rows = []
    for database in args.databases:
        for batch in args.batch:
            print(
                f"== {database}: {jobs} noop jobs, {batch} per request, {args.clients} clients, "
                f"{args.slots} slots"
            )
            rows.append(_run_child(database, jobs, batch, args))
            print(_format(rows[-1]), flush=True)
    _print_table(rows)
    OUT.parent.mkdir(exist_ok=True)
    report = {
        "command": " ".join(
            [
                "python",
                "tests/benchmarks/bench_admission.py",
                *(sys.argv[1:] if argv is None else argv),
            ]
        ),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "slots": args.slots,
        "clients": args.clients,
        "rows": rows,
        "targets": {"submits_per_s": 200, "admissions_per_s_postgresql": 43},
    }
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="200 jobs per database")
    p.add_argument("--jobs", type=int, default=None, help="jobs per database (default 1000)")
    p.add_argument("--clients", type=int, default=8, help="submitting threads")
    p.add_argument("--slots", type=int, default=16, help="cluster slots (runs at once)")
    p.add_argument("--databases", nargs="+", choices=DATABASES, default=list(DATABASES))
    p.add_argument(
        "--batch",
        nargs="+",
        type=int,
        default=[1, 50],
        help="jobs per request, a row for each (default: 1 and 50)",
    )
    p.add_argument("--child", choices=DATABASES, help=argparse.SUPPRESS)
    p.add_argument("--row-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _run_child(database: str, jobs: int, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Measure one database in a process of its own (Django is set up once per process)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [sys.executable, __file__, "--child", database, "--jobs", str(jobs)]
        argv += ["--batch", str(batch)]
        argv += ["--clients", str(args.clients), "--slots", str(args.slots), "--row-out", out.name]
        subprocess.run(argv, check=True, cwd=ROOT)
        return dict(json.loads(Path(out.name).read_text()))


# --- one database --------------------------------------------------------------------------


def measure(database: str, *, jobs: int, clients: int, slots: int, batch: int) -> dict[str, Any]:
    """Steps: 1. database and stack; 2. tenant, member, token; 3. submit; 4. wait; 5. figures."""
    work = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    stack = devstack.Stack()
    pg_name = f"synclane_bench_{uuid.uuid4().hex[:10]}" if database == "postgresql" else None
    try:
        if pg_name is not None:
            _postgres(f"CREATE DATABASE {pg_name}")
        env = _environment(stack, work, database, pg_name, slots)
        token = _fixtures(slots)
        procs = _start(stack, work, env, slots)
        procs["redis"] = stack.get("redis").proc.pid  # type: ignore[union-attr]  # started
        if pg_name is not None and (postmaster := _postmaster()) is not None:
            procs["postgres"] = postmaster
        cpu_before = _cpu(procs)
        submitted = _submit(int(env["BENCH_PORT"]), token, jobs, clients, batch)
        left = _wait_until_done(jobs, timeout=max(300.0, jobs / 2))
        cpu = {name: after - cpu_before[name] for name, after in _cpu(procs).items()}
        return {**_figures(database, jobs, submitted, cpu), "batch_size": batch, "not_ended": left}
    finally:
        from django.db import connections

        connections.close_all()
        stack.stop()
        if pg_name is not None:
            _postgres(f"DROP DATABASE IF EXISTS {pg_name} WITH (FORCE)")


def _postgres(statement: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]  # our own fixed statements


def _environment(
    stack: devstack.Stack, work: Path, database: str, pg_name: str | None, slots: int
) -> dict[str, str]:
    """Start Redis, point Django at the fresh database, migrate; return the processes' env."""
    redis_url = devstack.start_private_redis(stack, work, log=work / "redis.log")
    url = (
        f"sqlite:///{work / 'bench.sqlite3'}"
        if pg_name is None
        else f"postgres://postgres@127.0.0.1:5432/{pg_name}"
    )
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": url,
        "SYNCLANE_RUN_DIR": str(work),
        "SYNCLANE_JOBS_DIR": str(work / "jobs"),
        "SYNCLANE_CLUSTER_SLOTS": str(slots),
        "SYNCLANE_NODE_SLOTS": str(slots),
        "SYNCLANE_LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(f"  {database}: migrated", flush=True)
    return env


def _fixtures(slots: int) -> str:
    """One tenant holding the whole cluster, a member, and the member's API token."""
    from django.contrib.auth import get_user_model

    from controlplane.accounts.services import token_issue
    from controlplane.tenancy.models import Membership, Tenant

    tenant = Tenant.objects.create(
        slug="bench",
        name="Bench",
        slot_quota=slots,
        max_running_jobs=slots,
        bandwidth_quota_mbps=1000,
    )
    user = get_user_model().objects.create_user(username="bench", password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role="member")
    _, key = token_issue(user=user, name="bench", ttl_days=1)
    return str(key)


def _start(stack: devstack.Stack, work: Path, env: dict[str, str], slots: int) -> dict[str, int]:
    """Start the Celery worker and daphne; return their pids by name."""
    worker = stack.start(
        "worker", devstack.worker_argv(slots, work), env=env, log=work / "worker.log"
    )
    port = devstack.free_port()
    asgi = stack.start("asgi", devstack.asgi_argv(port), env=env, log=work / "asgi.log")
    devstack.wait_for_port(port, timeout=60, proc=asgi)
    _wait_for_worker(timeout=120)
    env["BENCH_PORT"] = str(port)
    return {"worker": worker.pid, "asgi": asgi.pid}


def _postmaster() -> int | None:
    """The local PostgreSQL server's main process (its backends are its children), if any.

    Its CPU is the database's share of each job; anything else using that server meanwhile
    is counted too, so the figure is an upper bound on a machine that shares it.
    """
    import psutil

    for proc in psutil.process_iter(["name", "ppid"]):
        try:
            if proc.info["name"] == "postgres" and psutil.Process(proc.info["ppid"]).name() != (
                "postgres"
            ):
                return int(proc.pid)
        except psutil.Error:
            continue
    return None


def _wait_for_worker(timeout: float) -> None:
    from workers.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError("the Celery worker did not answer")


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each process and its descendants (finished children too)."""
    import psutil

    out = {}
    for name, pid in pids.items():
        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:4])  # user, system, children's user and system
        for child in proc.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:4])
            except psutil.NoSuchProcess:
                continue
        out[name] = total
    return out


def _submit(port: int, token: str, jobs: int, clients: int, batch: int) -> dict[str, Any]:
    """POST ``jobs`` noop jobs from ``clients`` threads, ``batch`` per request; return counts
    (of jobs, by the status of their request) and the window."""
    job = {"workload": "noop", "world_size": 1, "steps": 1}
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    counter = iter(range(0, jobs, batch))

    def request(first: int) -> tuple[str, dict[str, Any]]:
        names = [f"n{n}" for n in range(first, min(first + batch, jobs))]
        if batch == 1:
            return "/api/v1/jobs/", {"tenant": "bench", **job, "name": names[0]}
        return "/api/v1/jobs/batch/", {
            "tenant": "bench",
            "jobs": [{**job, "name": n} for n in names],
        }

    def client() -> None:
        conn = HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                first = next(counter, None)
            if first is None:
                break
            path, body = request(first)
            conn.request("POST", path, json.dumps(body), headers)
            response = conn.getresponse()
            response.read()
            count = len(body.get("jobs", [body]))
            with lock:
                statuses[response.status] = statuses.get(response.status, 0) + count
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window = time.monotonic() - began
    accepted = statuses.get(201, 0)
    print(f"  submitted {accepted}/{jobs} in {window:.1f} s, statuses {statuses}", flush=True)
    return {"accepted": accepted, "window_s": window, "statuses": statuses}


def _wait_until_done(jobs: int, timeout: float, stall_s: float = 90.0) -> int:
    """Wait until every job has ended, or none has for ``stall_s``; return how many have not
    (reported with the figures, which cover the jobs that ran)."""
    from controlplane.jobs.choices import TERMINAL
    from controlplane.jobs.models import Job

    deadline = time.monotonic() + timeout
    done, last_change = 0, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last_change < stall_s:
        now_done = Job.objects.filter(status__in=TERMINAL).count()
        if now_done >= jobs:
            return 0
        if now_done != done:
            done, last_change = now_done, time.monotonic()
        time.sleep(1.0)
    left = Job.objects.exclude(status__in=TERMINAL).count()
    print(f"  {left} jobs had not ended (no progress for {stall_s:.0f} s)", flush=True)
    return left


def _figures(
    database: str, jobs: int, submitted: dict[str, Any], cpu: dict[str, float]
) -> dict[str, Any]:
    from controlplane.jobs.models import Job
    from controlplane.scheduling.simulate import percentile

    columns = ("status", "created_at", "admitted_at", "started_at", "finished_at")
    rows = list(Job.objects.values_list(*columns))
    admitted = sorted(a.timestamp() for _, _, a, _, _ in rows if a is not None)
    waits = sorted((s - c).total_seconds() for _, c, _, s, _ in rows if s is not None)
    span = admitted[-1] - admitted[0] if len(admitted) > 1 else 0.0
    succeeded = sum(1 for status, *_ in rows if status == "succeeded")
    refills = _refill_gaps(admitted, sorted(f.timestamp() for *_, f in rows if f is not None))
    total_cpu = sum(cpu.values())
    return {
        "database": database,
        "jobs": jobs,
        "submits_per_s": submitted["accepted"] / submitted["window_s"],
        "admissions_per_s": (len(admitted) - 1) / span if span > 0 else 0.0,
        "submit_to_running_p50_s": percentile(waits, 50),
        "submit_to_running_p99_s": percentile(waits, 99),
        "accepted": submitted["accepted"],
        "succeeded": succeeded,
        "submit_window_s": submitted["window_s"],
        "admission_span_s": span,
        "cpu_s": cpu,
        # What one submit costs daphne, and one job (passes, launch, supervision, the noop
        # process itself) costs the worker: 1000 / these is the rate one free core would give.
        "asgi_cpu_ms_per_submit": cpu["asgi"] / max(1, submitted["accepted"]) * 1e3,
        "worker_cpu_ms_per_job": cpu["worker"] / max(1, jobs) * 1e3,
        # Every process of the stack (daphne, worker and runs, Redis, and PostgreSQL's server
        # where it is local) per job, and the admission rate this machine's cores would give
        # if CPU were all that limited it.
        "cpu_ms_per_job_total": total_cpu / max(1, jobs) * 1e3,
        "cpu_s_by_process": cpu,
        "cpu_bound_admissions_per_s": (os.cpu_count() or 1) * jobs / total_cpu
        if total_cpu
        else 0.0,
        # Freed capacity reused: from each job's end to the next admission after it.
        "refill_p50_s": percentile(refills, 50),
        "refill_p99_s": percentile(refills, 99),
        "load_average": os.getloadavg(),
    }


def _refill_gaps(admitted: list[float], finished: list[float]) -> list[float]:
    """For each job end followed by an admission, the seconds until that admission (both
    lists sorted): how long a freed slot stayed free while jobs were waiting for one."""
    import bisect

    gaps = []
    for end in finished:
        i = bisect.bisect_right(admitted, end)
        if i < len(admitted):
            gaps.append(admitted[i] - end)
    return sorted(gaps)


# --- output ---------------------------------------------------------------------------------


def _format(r: dict[str, Any]) -> str:
    return (
        f"  {r['database']}, {r['batch_size']} per request: {r['submits_per_s']:.0f} submits/s, "
        f"{r['admissions_per_s']:.1f} admissions/s, submit->running p50 "
        f"{r['submit_to_running_p50_s']:.2f} s p99 {r['submit_to_running_p99_s']:.2f} s, "
        f"{r['succeeded']}/{r['jobs']} succeeded, CPU ms per submit "
        f"{r['asgi_cpu_ms_per_submit']:.0f} (daphne), per job {r['worker_cpu_ms_per_job']:.0f} "
        f"(worker and run), {r['cpu_ms_per_job_total']:.0f} in all per job "
        f"(CPU-bound at {r['cpu_bound_admissions_per_s']:.0f} admissions/s), refill p50 "
        f"{r['refill_p50_s'] * 1e3:.0f} ms, load average {r['load_average'][0]:.1f}"
    )


def _print_table(rows: list[dict[str, Any]]) -> None:
    print()
    print("| database | jobs | per request | submits/s | admissions/s | submit->running p50 (s) | p99 (s) "
          "| CPU ms per submit (daphne) | CPU ms per job (worker + run) "
          "| CPU ms per job, every process | CPU-bound admissions/s | refill p50 / p99 (ms) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['database']} | {r['jobs']} | {r['batch_size']} | {r['submits_per_s']:.0f} "
            f"| {r['admissions_per_s']:.1f} | {r['submit_to_running_p50_s']:.2f} "
            f"| {r['submit_to_running_p99_s']:.2f} "
            f"| {r['asgi_cpu_ms_per_submit']:.0f} | {r['worker_cpu_ms_per_job']:.0f} "
            f"| {r['cpu_ms_per_job_total']:.0f} | {r['cpu_bound_admissions_per_s']:.0f} "
            f"| {r['refill_p50_s'] * 1e3:.0f} / {r['refill_p99_s'] * 1e3:.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
