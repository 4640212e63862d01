"""The trace simulator: replays the shipped example and prints its fairness, wait and eviction metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduling import simulate

EXAMPLE = Path(simulate.__file__).parent / "traces" / "example.json"


def small_trace(**cluster: float) -> dict[str, Any]:
    return {
        "cluster": {"slots": 8, "fabric_mbps": 1000, **cluster},
        "tenants": [
            {
                "name": "vision",
                "nominal_slots": 8,
                "nominal_mbps": 1000,
                "queue_policy": "BestEffortFIFO",
            }
        ],
        "jobs": [
            {
                "id": "a",
                "tenant": "vision",
                "arrival": 0,
                "slots": 8,
                "priority": "low",
                "duration": 100,
                "comm_fraction": 0.0,
            },
            {
                "id": "b",
                "tenant": "vision",
                "arrival": 10,
                "slots": 8,
                "priority": "critical",
                "duration": 50,
                "comm_fraction": 0.0,
                "deadline": 60,
            },
        ],
        "checkpoint_s": 5,
    }


def test_it_replays_the_example_trace_and_prints_every_metric() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "controlplane.scheduling.simulate", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in (
        "simulated wall time",
        "admissions",
        "time to admission",
        "slot utilisation",
        "bandwidth utilisation",
        "deadline misses",
        "preemptions",
        "decision time (real)",
    ):
        assert line in out


def test_it_completes_every_job_of_the_example_in_each_bandwidth_mode() -> None:
    trace = simulate.load(json.loads(EXAMPLE.read_text()))
    for mode in simulate.MODES:
        metrics = simulate.run(trace, mode)
        assert metrics.completed == metrics.jobs == len(trace.jobs)
        assert 0 < metrics.slot_utilisation <= 1
        assert 0 < metrics.bandwidth_utilisation <= 1 + 1e-9


def test_a_preempted_job_resumes_from_its_last_checkpoint() -> None:
    metrics = simulate.run(simulate.load(small_trace()))
    # b preempts a at t=10 (a has 10 s of work, checkpointed at 10), b runs 10..60,
    # a resumes at 60 with 90 s left and ends at 150.
    assert metrics.preemptions == 1
    assert metrics.wall_s == pytest.approx(150)
    assert metrics.deadline_misses == 0
    assert metrics.time_to_admission["critical"]["p50"] == 0


def test_it_refuses_an_unknown_bandwidth_mode() -> None:
    with pytest.raises(ValueError, match="bandwidth must be one of"):
        simulate.Simulation(simulate.load(small_trace()), "lottery")


def test_its_metrics_print_as_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(small_trace()))
    assert simulate.main([str(path), "--json", "--bandwidth", "fcfs"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["mode"] == "fcfs" and printed["completed"] == 2
    assert simulate.main([str(path), "--json", "--admission-latency-ms", "250"]) == 0
    assert json.loads(capsys.readouterr().out)["admission_latency_s"] == 0.25


def test_it_ends_when_the_jobs_left_can_never_be_admitted() -> None:
    raw = small_trace()
    raw["jobs"].append(
        {"id": "huge", "tenant": "vision", "arrival": 0, "slots": 64, "duration": 10, "deadline": 5}
    )
    metrics = simulate.run(simulate.load(raw))
    assert (metrics.completed, metrics.jobs) == (2, 3)
    assert metrics.misses_by_class == {"normal": 1}


def test_it_refuses_a_trace_without_a_checkpoint_interval() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        simulate.load({**small_trace(), "checkpoint_s": 0})


def test_a_link_change_moves_bandwidth_to_the_higher_priority_floor() -> None:
    def job(job_id: str, priority: str) -> dict[str, Any]:
        return {
            "id": job_id,
            "tenant": "vision",
            "arrival": 0,
            "slots": 1,
            "priority": priority,
            "duration": 100,
            "comm_fraction": 1.0,
            "floor_mbps": 600,
            "ceiling_mbps": 600,
        }

    raw = {
        "cluster": {"slots": 8, "fabric_mbps": 1200},
        "tenants": [{"name": "vision", "nominal_slots": 8, "nominal_mbps": 1200}],
        "jobs": [job("low", "low"), job("high", "critical")],
        "fabric_changes": [{"at": 10, "fabric_mbps": 600}],
    }
    metrics = simulate.run(simulate.load(raw))
    # both run at full speed for 10 s; then only the critical job keeps its floor and ends at
    # 100; the low one resumes then and ends at 190
    assert metrics.completed == 2
    assert metrics.wall_s == pytest.approx(190)
    assert metrics.bandwidth_utilisation == pytest.approx(1.0)


def test_a_replay_is_deterministic() -> None:
    trace = simulate.load(json.loads(EXAMPLE.read_text()))
    timing = {"decision_real_s", "decision_max_ms", "decision_us_per_job"}

    def replay() -> dict[str, Any]:
        return {k: v for k, v in simulate.run(trace).as_dict().items() if k not in timing}

    assert replay() == replay()


def four_short_jobs(**tenant: str) -> dict[str, Any]:
    """Four 1-slot jobs of 10 s, arriving at 0, no communication; 8 slots."""
    job = {"tenant": "vision", "arrival": 0, "slots": 1, "duration": 10, "comm_fraction": 0}
    return {
        "cluster": {"slots": 8, "fabric_mbps": 1000},
        "tenants": [{"name": "vision", "nominal_slots": 8, "nominal_mbps": 1000, **tenant}],
        "jobs": [{**job, "id": f"j{n}"} for n in range(4)],
        "checkpoint_s": 5,
    }


@pytest.mark.timeout(30)
def test_decision_latency_spaces_a_classical_cohorts_admissions() -> None:
    # A classical cohort admits at most one head per queue per decision, so four jobs of one
    # queue need four decisions; each decision takes 0.5 s of simulated time, so the fourth
    # admission comes 1.5 s after the first, and its work starts when that decision ends,
    # at 2.0 s. (This replay never ended once: a decision that left more to admit asked for
    # the next one at once, inside the latency of its own.)
    raw = {**four_short_jobs(cohort="c"), "options": {"cohort_order": {"c": "Classical"}}}
    instant = simulate.run(simulate.load(raw))
    charged = simulate.run(simulate.load(raw), decision_latency_s=0.5)
    assert instant.time_to_first_admission_ms["p99"] == 0
    assert charged.completed == 4
    assert charged.time_to_first_admission_ms["p99"] == pytest.approx(1500)
    assert charged.wall_s == pytest.approx(12.0)


def test_admission_latency_starts_each_job_of_a_decision_one_latency_after_the_last() -> None:
    # One decision admits all four jobs (fair share); the real path launches them one after
    # another, 0.5 s each: their work starts at 0.5, 1.0, 1.5 and 2.0 s and ends 10 s later.
    raw = four_short_jobs()
    metrics = simulate.run(simulate.load(raw), admission_latency_s=0.5)
    assert metrics.decisions >= 1 and metrics.completed == 4
    assert metrics.time_to_first_admission_ms["p99"] == 0  # admitted by the first decision
    assert metrics.jct_mean_s == pytest.approx((10.5 + 11 + 11.5 + 12) / 4)
    assert metrics.wall_s == pytest.approx(12.0)
    assert simulate.load({**raw, "admission_latency": 0.5}).admission_latency_s == 0.5
    with pytest.raises(ValueError, match="must be >= 0"):
        simulate.load({**raw, "admission_latency": -1})
