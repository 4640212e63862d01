"""Where a training step's time goes: a per-step trace of one model under one sync strategy.

    .venv/bin/python tests/benchmarks/trace_sync.py                      # tiny_gpt, adaptive, 2 ranks, 100 Mbit/s
    .venv/bin/python tests/benchmarks/trace_sync.py --sync full --world 4 --show 2
    .venv/bin/python tests/benchmarks/trace_sync.py --model zoo:bn_mlp --link 1350
    .venv/bin/python tests/benchmarks/trace_sync.py --time strategy.local_drift --time session._agree

A diagnostic, not a benchmark (``make bench`` does not run it): it launches a real ``torchrun``
of this file, and on rank 0 records when forward, backward and the optimizer step (with the
session's per-step agreement) begin and end, and every collective of the gradient engine
("fg") and of the background averaging lane ("bg"). To see the collectives it wraps the
engine methods of this run's session that take and reduce transfers (``submit``,
``_reduce_chunk`` and their int8 counterparts), ``_agree``, and adaptive's start of an
average (``launch +lag``) and its application (``apply`` ... ``applied``: a wait shows
between the two); nothing else changes.
Prints the mean phase times of steps with and without background traffic; how far apart
the ranks start each step's last gradient collective (every rank records it on the
machine's monotonic clock, which all ranks share here) and how long it lasts from the first
rank's start to the last rank's end; then the timeline of the last ``--show`` steps (ms
from the step's start). ``--time OBJ.METHOD`` (``session.`` or ``strategy.``, repeatable)
also times each call of that method on rank 0 and prints its mean ms per step and per call:
where the session's per-step work goes. docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_sync import rank_env  # this directory is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[2]
PHASES = ("fwd", "bwd", "opt", "end")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny_gpt", help="as bench_sync's --models names one")
    ap.add_argument("--sync", default="adaptive")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--link", type=float, default=100.0, help="emulated link, Mbit/s")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=15, help="steps left out of the means")
    ap.add_argument("--show", type=int, default=1, help="timelines of the last N steps")
    ap.add_argument(
        "--set", action="append", default=[], metavar="SYNCLANE_X=V",
        help="a runtime setting for the ranks (repeatable), e.g. SYNCLANE_COMPRESS=none",
    )  # fmt: skip
    ap.add_argument(
        "--time", action="append", default=[], metavar="OBJ.METHOD",
        help="time every call of session.X or strategy.X, or of a method of their attribute: strategy.A.X (repeatable)",
    )  # fmt: skip
    ap.add_argument("--out", help=argparse.SUPPRESS)  # set by the launcher for the ranks
    return ap.parse_args(argv)


def launch(args: argparse.Namespace) -> tuple[list[list[Any]], list[dict[str, list[float]]]]:
    """Run this file under torchrun; return rank 0's events and every rank's arrivals."""
    with tempfile.TemporaryDirectory(prefix="trace-sync-") as tmp:
        out = Path(tmp) / "events.json"
        settings = dict(item.split("=", 1) for item in args.set)
        env = rank_env(args.link, **settings)  # the same environment as bench_sync's runs
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(args.world), __file__, "--model", args.model,
            "--sync", args.sync,
            "--steps", str(args.steps), "--out", str(out),
            *(arg for name in args.time for arg in ("--time", name)),
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"trace run failed:\n{proc.stderr[-3000:]}")
        events: list[list[Any]] = json.loads(out.read_text())
        arrivals = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(args.world)]
        return events, arrivals


def rank_main(args: argparse.Namespace) -> None:
    """One rank: train the model for ``--steps`` steps, as bench_sync does (its batches,
    loss and optimizer), recording events (rank 0 writes them)."""
    import torch
    import torch.distributed as dist
    from bench_sync import workload

    from workers.runtime.config import RuntimeConfig
    from workers.runtime.engine import CommEngine
    from workers.runtime.session import wrap

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    wl = workload(args.model)
    torch.manual_seed(0)
    net = wl.model()
    opt = torch.optim.AdamW(net.parameters(), lr=wl.lr, weight_decay=0.0)
    model = wrap(net, optimizer=opt, config=RuntimeConfig.from_env(sync=args.sync))
    t0 = time.perf_counter()
    events: list[list[Any]] = []
    # Per step, when this rank's engine began and ended the step's last gradient collective
    # (perf_counter is the machine's monotonic clock, the same in every rank's process).
    arrivals: dict[str, list[float]] = {
        "start": [math.nan] * args.steps,
        "end": [math.nan] * args.steps,
    }
    current = [0]  # the step the main thread is in (index into arrivals)

    def mark(kind: str, nbytes: int = 0) -> None:
        now = time.perf_counter()
        events.append([round((now - t0) * 1000, 2), kind, nbytes])
        if kind in ("fg start", "fg end"):
            arrivals[kind[3:]][current[0]] = now

    def watch(engine: CommEngine, lane: str) -> None:
        submit, reduce_chunk = engine.submit, engine._reduce_chunk

        def traced_submit(tensor: torch.Tensor, *, flush: bool, **kw: Any) -> Any:
            mark(f"{lane} submit", tensor.numel() * tensor.element_size())
            return submit(tensor, flush=flush, **kw)

        def traced_chunk(chunk: torch.Tensor) -> None:
            mark(f"{lane} start", chunk.numel() * chunk.element_size())
            reduce_chunk(chunk)
            mark(f"{lane} end")

        submit_q, reduce_q = engine.submit_quantized, engine._reduce_quantized_chunk

        def traced_submit_q(packed: torch.Tensor, *, key: Any, flush: bool) -> Any:
            mark(f"{lane} submit", packed.numel())
            return submit_q(packed, key=key, flush=flush)

        def traced_chunk_q(chunk: torch.Tensor, key: Any) -> None:
            mark(f"{lane} start", chunk.numel())
            reduce_q(chunk, key)
            mark(f"{lane} end")

        engine.submit = traced_submit  # type: ignore[method-assign]
        engine._reduce_chunk = traced_chunk  # type: ignore[method-assign]
        engine.submit_quantized = traced_submit_q  # type: ignore[method-assign]
        engine._reduce_quantized_chunk = traced_chunk_q  # type: ignore[method-assign]

    watch(model.session.engine, "fg")
    session = model.session
    agree = session._agree

    def traced_agree(outgoing: Any) -> Any:
        mark("agree")
        table = agree(outgoing)
        mark("agreed")
        return table

    session._agree = traced_agree  # type: ignore[method-assign]
    strategy = session.strategy
    if hasattr(strategy, "_apply_pending"):  # adaptive: when averages start and are applied
        apply, launch_sync = strategy._apply_pending, strategy._launch_sync

        def traced_apply() -> None:
            waiting = strategy._pending is not None
            mark("apply" if waiting else "no average")
            apply()
            if waiting:
                mark("applied")

        def traced_launch(step: int, *, lag: int) -> None:
            mark(f"launch +{lag}")
            launch_sync(step, lag=lag)

        strategy._apply_pending = traced_apply
        strategy._launch_sync = traced_launch
    if model.session.background is not None:
        watch(model.session.background, "bg")
    for name in args.time:
        time_calls(name, {"session": session, "strategy": strategy}, mark)
    for step in range(1, args.steps + 1):
        current[0] = step - 1
        mark("fwd")
        loss = wl.loss(model, 0, rank, step)
        mark("bwd")
        loss.backward()
        mark("opt")
        opt.step()  # the session's per-step work runs in the optimizer's post-step hook
        opt.zero_grad(set_to_none=True)
        mark("end")
    model.session.close()
    if rank == 0:
        Path(args.out).write_text(json.dumps(events))
    Path(f"{args.out}.{rank}").write_text(json.dumps(arrivals))
    dist.destroy_process_group()


def time_calls(name: str, objects: dict[str, Any], mark: Any) -> None:
    """Wrap ``name`` (``session.X`` or ``strategy.X``, or a method of one of their
    attributes: ``strategy.delta_feedback.compress``) so each call marks "took NAME" with
    its duration in microseconds."""
    owner, *path, attr = name.split(".")
    target = objects.get(owner)
    for part in path:
        target = getattr(target, part, None)
    if target is None or not callable(getattr(target, attr, None)):
        raise SystemExit(f"--time {name}: no such method (session.X or strategy.X)")
    method = getattr(target, attr)

    def timed(*a: Any, **kw: Any) -> Any:
        began = time.perf_counter()
        try:
            return method(*a, **kw)
        finally:
            mark(f"took {name}", round((time.perf_counter() - began) * 1e6))

    try:
        setattr(target, attr, timed)
    except AttributeError:  # a class with __slots__
        raise SystemExit(f"--time {name}: its object takes no new attributes") from None


def split_steps(events: list[list[Any]]) -> list[list[list[Any]]]:
    steps: list[list[list[Any]]] = []
    for event in events:
        if event[1] == "fwd":
            steps.append([])
        if steps:
            steps[-1].append(event)
    return steps


def report(
    events: list[list[Any]], arrivals: list[dict[str, list[float]]], args: argparse.Namespace
) -> None:
    steps = split_steps(events)
    rows: dict[bool, list[list[float]]] = {False: [], True: []}
    for step in steps[args.skip :]:
        at = {kind: t for t, kind, _ in step if kind in PHASES}
        busy_bg = any(kind.startswith("bg") for _, kind, _ in step)
        rows[busy_bg].append(
            [
                at["bwd"] - at["fwd"],
                at["opt"] - at["bwd"],
                at["end"] - at["opt"],
                at["end"] - at["fwd"],
            ]
        )
    print(
        f"{args.model}, {args.sync}, {args.world} ranks, {args.link:g} Mbit/s; "
        f"ms per step, steps {args.skip}+"
    )
    print(f"{'steps':<26} {'n':>3} {'forward':>8} {'backward':>9} {'opt+agree':>10} {'total':>7}")
    for busy, label in ((False, "without background traffic"), (True, "with background traffic")):
        if rows[busy]:
            means = [statistics.mean(r[i] for r in rows[busy]) for i in range(4)]
            print(f"{label:<26} {len(rows[busy]):>3} " + " ".join(f"{m:>8.1f}" for m in means))
    every = [r for group in rows.values() for r in group]
    if every:
        print(f"mean step {statistics.mean(r[3] for r in every):.1f} ms")
    meeting(arrivals, args)
    timed_calls(steps[args.skip :])
    for step in steps[-args.show :] if args.show else []:
        print("---")
        start = step[0][0]
        for t, kind, nbytes in step:
            print(f"{t - start:8.2f}  {kind:<10} {nbytes or ''}")


def timed_calls(steps: list[list[list[Any]]]) -> None:
    """Print the mean time per step and per call of each method named by ``--time``."""
    took: dict[str, list[float]] = {}
    for step in steps:
        for _, kind, micros in step:
            if kind.startswith("took "):
                took.setdefault(kind[5:], []).append(micros / 1000)
    for name, calls in sorted(took.items()):
        print(
            f"{name}: {sum(calls) / len(steps):.3f} ms per step, {len(calls)} calls, "
            f"median {statistics.median(calls):.3f} ms, mean {statistics.mean(calls):.3f} ms"
        )


def meeting(arrivals: list[dict[str, list[float]]], args: argparse.Namespace) -> None:
    """Print how far apart the ranks reach each step's last gradient collective, and how long
    it takes from the first rank's start to the last rank's end."""
    apart, took = [], []
    for i in range(args.skip, args.steps):
        starts = [a["start"][i] for a in arrivals]
        ends = [a["end"][i] for a in arrivals]
        if any(math.isnan(t) for t in starts + ends):
            continue
        apart.append(1000 * (max(starts) - min(starts)))
        took.append(1000 * (max(ends) - min(starts)))
    if apart:
        print(
            f"last gradient collective: ranks start it {statistics.mean(apart):.1f} ms apart "
            f"(median {statistics.median(apart):.1f}); first start to last end "
            f"{statistics.mean(took):.1f} ms (median {statistics.median(took):.1f}), {len(apart)} steps"
        )


def main() -> None:
    args = parse_args()
    if args.out:  # a rank under torchrun
        rank_main(args)
        return
    report(*launch(args), args)


if __name__ == "__main__":
    main()
