"""DriftMonitor: the sync_drift alarm's raise / enhance / clear decisions."""

from __future__ import annotations

import json

import redis
import torch

from workers.runtime import protocol as p
from workers.runtime.drift import DriftMonitor, relative_distance
from workers.runtime.reporter import Reporter


def test_relative_distance_is_relative_to_the_reference_norm() -> None:
    ref = torch.tensor([3.0, 4.0])
    assert relative_distance(torch.tensor([3.0, 4.5]), ref) == 0.1
    assert relative_distance(torch.ones(2), torch.zeros(2)) == 0.0


def test_it_raises_on_the_worst_rank_enhances_and_clears_once_recovered(
    redis_url: str, r: redis.Redis
) -> None:
    reporter = Reporter(redis_url=redis_url, job_id="60")
    mon = DriftMonitor(threshold=0.1, reporter=reporter)
    assert mon.update(step=1, drifts=[0.02, 0.03]) is False
    assert mon.update(step=2, drifts=[0.02, 0.4]) is True  # rank 1 drifted
    assert mon.update(step=3, drifts=[0.01, 0.07]) is True  # below threshold, not yet recovered
    assert mon.update(step=4, drifts=[0.01, 0.04]) is False  # below threshold * 0.5
    reporter.close()
    raised, cleared = (json.loads(f["data"]) for _, f in r.xrange(p.telemetry_stream("60")))
    assert (
        raised["kind"],
        raised["state"],
        raised["step"],
        raised["value"],
        raised["threshold"],
    ) == (
        "sync_drift",
        "raised",
        2,
        0.4,
        0.1,
    )
    assert "rank 1" in raised["detail"]
    assert (cleared["state"], cleared["step"], cleared["value"]) == ("cleared", 4, 0.04)


def test_it_tracks_gradient_norm_variance_and_loss_descent() -> None:
    mon = DriftMonitor(threshold=1.0, reporter=None)
    mon.update(step=1, drifts=[0.0, 0.0], grad_norms=[1.0, 3.0], losses=[2.0, 2.0])
    mon.update(step=2, drifts=[0.0, 0.0], grad_norms=[2.0, 2.0], losses=[1.0, 1.0])
    assert mon.grad_norm_var == 0.0
    assert mon.loss_rate < 0


def test_covered_figures_raise_and_clear_nothing_and_ask_for_no_sync() -> None:
    # Covered: an average already started from the parameters measured (adaptive's table is
    # a step late, so the drift of the step an average started at arrives after it).
    mon = DriftMonitor(threshold=0.1, reporter=None)
    assert mon.update(step=1, drifts=[0.02, 0.4], covered=True) is False
    assert (mon.alarms_raised, mon.enhancing, mon.last_drift) == (0, False, 0.4)
    assert mon.update(step=2, drifts=[0.02, 0.4]) is True  # uncovered: raised
    # Covered while raised: no sync asked for, the alarm stays up (no clear on 0.01 either).
    assert mon.update(step=3, drifts=[0.01, 0.01], covered=True) is False
    assert (mon.enhancing, mon.alarms_cleared) == (True, 0)
    assert mon.update(step=4, drifts=[0.01, 0.01]) is False  # uncovered: cleared
    assert (mon.alarms_raised, mon.alarms_cleared) == (1, 1)
