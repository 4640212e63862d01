"""bench_sync's bookkeeping: each run is compared with the full run nearest to it."""

from __future__ import annotations

from typing import Any

from bench_sync import rows_of, table  # this directory is on sys.path for its tests


def a_run(strategy: str, seconds: float, *, link: float | None = 1000.0) -> dict[str, Any]:
    """A run's record as train_run returns it: 100 steps of 10 samples in ``seconds``."""
    return {
        "strategy": strategy,
        "probe": False,
        "regime": "-" if link is None else f"{link:g}",
        "link_mbps": link,
        "budget": 100,
        "samples_per_step": 10,
        "steps_run": 100,
        "t_budget": seconds,
        "val_at_budget": 1.0,
        "evals": [[100, seconds, 1.0]],
        "bytes_per_step": 0.0,
    }


def test_each_run_is_compared_with_the_nearest_full_run() -> None:
    # The machine slows down over the run: full 2.0 s before the pair, 2.4 s after it.
    runs = [
        a_run("none", 1.0, link=None),
        a_run("full", 2.0),
        a_run("adaptive", 1.0),
        a_run("adaptive", 1.2),
        a_run("full", 2.4),
        a_run("powersgd", 3.0),
    ]
    rows = rows_of(runs, model="m", world=2, seed=0)
    by = [(r["strategy"], r.get("x_full"), r.get("speedup_to_target")) for r in rows]
    assert by == [
        ("none", None, None),
        ("full", 1.0, 1.0),
        ("adaptive", 2.0, 2.0),  # against the full run before it
        ("adaptive", 2.0, 2.0),  # against the one after it
        ("full", 1.0, 1.0),
        ("powersgd", 0.8, 0.8),  # against the full run just before it
    ]
    # The table's "x full" is the mean of the runs' ratios (2.0), not the ratio of the means
    # of all adaptive and all full runs (2.2 / 1.1 s: 1.96).
    line = next(x for x in table(rows).splitlines() if " adaptive " in x)
    assert line.split()[6] == "2.00", line  # model, ranks, "1000 Mb/s", strategy, samples/s
