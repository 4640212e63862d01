"""Benchmark of the live stream: run -> Redis stream -> ingest -> channel layer -> browser.

    python tests/benchmarks/bench_stream.py           # full curve, writes bench-results/stream.json
    python tests/benchmarks/bench_stream.py --quick   # two points, about a minute

Everything is real and on loopback: a private redis-server, the ``telemetry_ingest``
command, daphne serving ``controlplane.asgi``, and M websocket clients (in their own
process, authenticated by session cookie, each watching ``ws/jobs/<id>/`` of one of the
N runs). N simulated runs XADD ``metrics`` messages at ``hz`` to their streams exactly as
``workers.runtime.reporter.Reporter`` does. Latency is client receipt time minus the
``ts`` the run stamped into the message (same clock), so it covers the stream, ingest,
database write, channel layer and websocket. CPU is the ingest's and daphne's, in percent
of one core, over the measured window.

Steps per point: 1. create N jobs; 2. start the clients and wait until all are connected;
3. publish for ``warmup + seconds``; 4. collect latencies of messages stamped after the
warm-up; 5. stop the clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controlplane import devstack  # noqa: E402
from controlplane.lib.secret_key import ensure_key_file  # noqa: E402

FULL = [(1, 1), (1, 10), (5, 10), (5, 50), (20, 10), (20, 50), (40, 50), (20, 100)]
QUICK = [(5, 10), (20, 50)]


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    points = QUICK if args.quick else FULL
    seconds = args.seconds or (5.0 if args.quick else 10.0)
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    stack = devstack.Stack()
    rows: list[dict[str, Any]] = []
    try:
        env = _start(stack, work)
        for runs, clients in points:
            row = _measure(env, runs=runs, clients=clients, hz=args.hz, seconds=seconds, warmup=1.5)
            rows.append(row)
            print(_format(row), flush=True)
    finally:
        stack.stop()
    _print_table(rows)
    out = ROOT / "bench-results" / "stream.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(_report(rows, args, seconds), indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two points, shorter windows")
    p.add_argument("--hz", type=float, default=10.0, help="messages per second per run")
    p.add_argument("--seconds", type=float, default=None, help="measured window per point")
    return p.parse_args(argv)


# --- the stack ---------------------------------------------------------------------------


def _start(stack: devstack.Stack, work: Path) -> dict[str, str]:
    """Start redis, migrate a fresh SQLite DB, start ingest and daphne; return the env."""
    redis_url = devstack.start_private_redis(stack, work, log=work / "redis.log")
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
        "SYNCLANE_RUN_DIR": str(work),
        "DJANGO_SECRET_KEY": ensure_key_file(work),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "SYNCLANE_LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    port = devstack.free_port()
    stack.start("ingest", devstack.ingest_argv(), env=env, log=work / "ingest.log")
    asgi = stack.start("asgi", devstack.asgi_argv(port), env=env, log=work / "asgi.log")
    devstack.wait_for_port(port, timeout=60, proc=asgi)
    env["BENCH_PORT"] = str(port)
    env["BENCH_PIDS"] = ",".join(
        str(p.pid) for name, p in stack.procs if name in {"ingest", "asgi"}
    )
    return env


def _fixtures(runs: int) -> tuple[list[int], str]:
    """Create a tenant, a member and ``runs`` jobs (queued: nothing launches); return ids and a cookie."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from controlplane.jobs.models import Job, Queue
    from controlplane.tenancy.models import Membership, Tenant

    tenant, _ = Tenant.objects.get_or_create(
        slug="bench", defaults={"name": "Bench", "slot_quota": 0}
    )
    queue, _ = Queue.objects.get_or_create(tenant=tenant, name="default")
    user, created = get_user_model().objects.get_or_create(username="bench")
    if created:
        Membership.objects.create(user=user, tenant=tenant, role="member")
    jobs = [
        Job.objects.create(
            tenant=tenant,
            queue=queue,
            name=f"run{i}",
            workload="tiny_gpt",
            world_size=1,
            steps=10**6,
            sync="full",
        )
        for i in range(runs)
    ]
    client = Client()
    client.force_login(user)
    return [j.pk for j in jobs], client.cookies["sessionid"].value


# --- one point ---------------------------------------------------------------------------


def _measure(
    env: dict[str, str], *, runs: int, clients: int, hz: float, seconds: float, warmup: float
) -> dict[str, Any]:
    job_ids, cookie = _fixtures(runs)
    port = int(env["BENCH_PORT"])
    ready, stop = mp.Event(), mp.Event()
    results: mp.Queue[Any] = mp.Queue()
    start_at = mp.Value("d", 0.0)
    listener = mp.Process(
        target=_clients_main,
        args=(port, cookie, job_ids, clients, ready, stop, start_at, results),
        daemon=True,
    )
    listener.start()
    if not ready.wait(timeout=60):
        raise RuntimeError("websocket clients did not connect")
    cpu = _Cpu([int(p) for p in env["BENCH_PIDS"].split(",")])
    measure_from = time.time() + warmup
    start_at.value = measure_from
    sent = asyncio.run(
        _publish(
            env["REDIS_URL"],
            job_ids,
            hz=hz,
            until=measure_from + seconds,
            cpu=cpu,
            measure_from=measure_from,
        )
    )
    time.sleep(1.0)  # let the tail arrive
    stop.set()
    latencies, received = results.get(timeout=30)
    listener.join(timeout=10)
    latencies.sort()
    expected = clients * hz * seconds
    return {
        "runs": runs,
        "clients": clients,
        "hz": hz,
        "p50_ms": round(_pct(latencies, 50), 2),
        "p99_ms": round(_pct(latencies, 99), 2),
        "max_ms": round(latencies[-1], 2) if latencies else None,
        "msgs_per_s": round(received / seconds, 1),
        "delivered": round(received / expected, 4) if expected else None,
        "published": sent,
        "cpu_ingest_pct": cpu.result[0],
        "cpu_asgi_pct": cpu.result[1],
        "load_avg_1m": round(
            os.getloadavg()[0], 2
        ),  # the machine is shared: context for the numbers
    }


async def _publish(
    redis_url: str, job_ids: list[int], *, hz: float, until: float, cpu: _Cpu, measure_from: float
) -> int:
    """Each run XADDs a metrics message every 1/hz s (what Reporter.log sends)."""
    import redis.asyncio as aioredis

    from workers.runtime import protocol as p

    client = aioredis.Redis.from_url(redis_url)
    counts = [0]

    async def run(job_id: int, offset: float) -> None:
        stream = p.telemetry_stream(job_id)
        await client.sadd(p.ACTIVE_STREAMS_KEY, str(job_id))
        step, next_at = 0, time.time() + offset
        while next_at < until:
            await asyncio.sleep(max(0.0, next_at - time.time()))
            step += 1
            data = {
                "loss": 3.0,
                "samples_per_s": 100.0,
                "tokens_per_s": 6400.0,
                "step_time_s": 0.1,
                "comm_time_s": 0.02,
                "step": step,
                "ts": time.time(),
                "rank": 0,
            }
            await client.xadd(
                stream,
                {"type": p.MSG_METRICS, "data": json.dumps(data)},
                maxlen=p.STREAM_MAXLEN,
                approximate=True,
            )
            counts[0] += 1
            next_at += 1.0 / hz

    async def cpu_window() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.time()))
        cpu.start()
        await asyncio.sleep(max(0.0, until - time.time()))
        cpu.stop()

    # Spread the runs over one period, as independent runs would be.
    await asyncio.gather(
        cpu_window(), *(run(j, i / (hz * len(job_ids))) for i, j in enumerate(job_ids))
    )
    await client.aclose()
    return counts[0]


def _clients_main(port, cookie, job_ids, clients, ready, stop, start_at, results) -> None:  # type: ignore[no-untyped-def]
    results.put(asyncio.run(_clients(port, cookie, job_ids, clients, ready, stop, start_at)))


async def _clients(
    port, cookie, job_ids, clients, ready, stop, start_at
) -> tuple[list[float], int]:  # type: ignore[no-untyped-def]
    import websockets

    latencies: list[float] = []
    received = [0]
    connected = [0]
    headers = {"Cookie": f"sessionid={cookie}", "Origin": f"http://127.0.0.1:{port}"}

    async def one(i: int) -> None:
        uri = f"ws://127.0.0.1:{port}/ws/jobs/{job_ids[i % len(job_ids)]}/"
        async with websockets.connect(uri, additional_headers=headers, max_queue=None) as ws:
            await ws.recv()  # the status greeting
            connected[0] += 1
            if connected[0] == clients:
                ready.set()
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
                except TimeoutError:
                    continue
                now = time.time()
                msg = json.loads(raw)
                ts = msg.get("data", {}).get("ts") if msg.get("type") == "metrics" else None
                if ts and start_at.value and ts >= start_at.value:
                    latencies.append((now - ts) * 1000)
                    received[0] += 1

    await asyncio.gather(*(one(i) for i in range(clients)))
    return latencies, received[0]


class _Cpu:
    """CPU time of some processes (and their children) over a window, % of one core."""

    def __init__(self, pids: list[int]):
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.result: list[float | None] = [None] * len(pids)
        self._t0 = 0.0
        self._c0: list[float] = []

    def _times(self) -> list[float]:
        out = []
        for proc in self.procs:
            total = sum(proc.cpu_times()[:2])
            for child in proc.children(recursive=True):
                total += sum(child.cpu_times()[:2])
            out.append(total)
        return out

    def start(self) -> None:
        self._t0, self._c0 = time.monotonic(), self._times()

    def stop(self) -> None:
        wall = time.monotonic() - self._t0
        self.result = [
            round(100 * (b - a) / wall, 1) for a, b in zip(self._c0, self._times(), strict=True)
        ]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def _format(row: dict[str, Any]) -> str:
    return (
        f"{row['runs']:>4} {row['clients']:>7} {row['hz']:>4g} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} "
        f"{row['msgs_per_s']:>10.1f} {row['delivered']:>9.3f} {row['cpu_ingest_pct']!s:>8} {row['cpu_asgi_pct']!s:>7} "
        f"{row['load_avg_1m']:>6}"
    )


def _print_table(rows: list[dict[str, Any]]) -> None:
    print()
    print("runs clients   hz   p50_ms   p99_ms msgs_per_s delivered  ingest%   asgi%   load")
    for row in rows:
        print(_format(row))


def _report(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> dict[str, Any]:
    return {
        "benchmark": "stream",
        "command": "python tests/benchmarks/bench_stream.py" + (" --quick" if args.quick else ""),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "window_s": seconds,
        "target": "20 runs x 10 Hz to 50 clients at p99 <= 100 ms",
        "rows": rows,
    }


if __name__ == "__main__":
    mp.set_start_method("spawn")
    raise SystemExit(main())
