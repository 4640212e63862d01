"""bench_sync's bookkeeping: each run is compared with the full run nearest to it."""

from __future__ import annotations

from typing import Any

import pytest
from bench_sync import (  # this directory is on sys.path for its tests
    arm_config,
    constant_changes,
    interval,
    rows_of,
    table,
)


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


def test_the_fast_link_verdict_gives_the_ratios_interval() -> None:
    # Three pair blocks at 1 Gbit/s (full, adaptive, adaptive, full, ...) and one in the seed
    # regime; adaptive's runs at 1 Gbit/s are 0.95-1.05x of their nearest full run.
    fast = [a_run("full", 2.0)]
    for first, second in ((2.0 / 0.95, 2.0 / 1.05), (2.0 / 0.97, 2.0 / 1.03), (2.0, 2.0)):
        fast += [a_run("adaptive", first), a_run("adaptive", second), a_run("full", 2.0)]
    seed = [a_run("full", 4.0, link=100.0), a_run("adaptive", 2.0, link=100.0)]
    for run in seed:
        run["regime"] = "seed"
    rows = rows_of([a_run("none", 1.0, link=None), *fast, *seed], model="m", world=2, seed=0)
    ratios = sorted(
        r["x_full"] for r in rows if r["strategy"] == "adaptive" and r["regime"] == "1000"
    )
    assert ratios == [0.95, 0.97, 1.0, 1.0, 1.03, 1.05]
    verdict = table(rows).splitlines()[-1]
    # Mean 1.00, standard deviation 0.0358 over 6 runs: t(5) = 2.57, half-width 0.0376.
    assert "1 Gbit/s 1.00x full, 95% interval 0.96-1.04 (>= 0.98: yes)" in verdict, verdict


def test_the_loss_gap_is_also_read_over_the_last_evaluations_up_to_the_budget() -> None:
    # Both runs fall to 1.0 by step 60; full ends at 1.2 at the budget, adaptive at 1.26
    # (+5% at the budget), and adaptive's evaluation after the budget counts for nothing.
    falling = [
        [step, step / 100, val]
        for step, val in zip(range(10, 60, 10), (5, 4, 3, 2, 1), strict=True)
    ]
    full, adaptive = a_run("full", 2.0, link=100.0), a_run("adaptive", 1.0, link=100.0)
    full["evals"] = [*falling, *([s, s / 100, 1.0] for s in (60, 70, 80, 90)), [100, 2.0, 1.2]]
    full["val_at_budget"] = 1.2
    adaptive["evals"] = [
        *falling,
        *([s, s / 100, 1.0] for s in (60, 70, 80, 90)),
        [100, 1.0, 1.26],
        [110, 1.1, 0.5],
    ]
    adaptive["val_at_budget"] = 1.26
    for run in (full, adaptive):
        run["regime"] = "seed"
    rows = rows_of([a_run("none", 1.0, link=None), full, adaptive], model="m", world=2, seed=0)
    by = {r["strategy"]: (r["val_tail"], r["target_val_tail"]) for r in rows}
    assert by["full"] == (1.04, 1.04) and by["adaptive"] == (1.052, 1.04), by
    verdict = table(rows).splitlines()[-1]
    # Over steps 60-100: (1.052 - 1.04) / 1.04 = +1.15%.
    assert "gap +5.00% (<= 0.15%: no; over the last 5 evaluations +1.15%)" in verdict, verdict


def test_interval_needs_three_runs() -> None:
    assert interval([1.0, 1.1]) == (None, None)
    low, high = interval([0.9, 1.0, 1.1])
    # Mean 1.0, sd 0.1, n 3: t(2) = 4.30, half-width 0.248.
    assert (round(low, 3), round(high, 3)) == (0.752, 1.248)


def test_an_arm_gives_its_strategy_and_changes_at_the_world_size() -> None:
    assert arm_config("adaptive-sqrt", 4) == ("adaptive", {"local_step_scale": 2.0})
    assert arm_config("adaptive-scale1", 2) == ("adaptive", {"local_step_scale": 1.0})
    assert arm_config("full", 2) == ("full", {})


def test_an_arm_changes_a_runtime_constant_for_its_run_only() -> None:
    from workers.runtime.strategies import adaptive

    before = adaptive.CRITICAL_FUSE_S
    _, changes = arm_config("adaptive-fuse16k", 2)
    with constant_changes(changes):
        assert adaptive.CRITICAL_FUSE_S == 0.0
        assert adaptive.critical_fuse_bytes(1.25e8, 2) == adaptive.FUSE_BYTES
    assert before == adaptive.CRITICAL_FUSE_S
    with pytest.raises(KeyError), constant_changes(changes):
        raise KeyError("a failed run")
    assert before == adaptive.CRITICAL_FUSE_S  # restored after a failure too
