"""Pure series helpers: min/max downsampling, link cells and matrices, enhancement periods."""

from __future__ import annotations

import pytest

from controlplane.telemetry.series import (
    downsample_columns,
    enhancement_periods,
    link_cells,
    link_matrix,
    minmax_downsample,
    stack_by_bucket,
)


def test_a_short_series_is_returned_unchanged():
    points = [(1, 1.0), (2, None), (3, 3.0)]
    assert minmax_downsample(points, 10) == points


def test_downsampling_bounds_the_points_and_keeps_a_one_step_spike():
    points = [(float(i), 1.0) for i in range(10_000)]
    points[4321] = (4321.0, 99.0)
    points[777] = (777.0, -5.0)
    kept = minmax_downsample(points, 200)
    assert len(kept) <= 200
    assert (4321.0, 99.0) in kept and (777.0, -5.0) in kept
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)


def test_downsampling_drops_gaps_and_non_finite_values_when_it_has_to_cut():
    points = [(float(i), None if i % 2 else float(i)) for i in range(100)] + [(100.0, float("nan"))]
    kept = minmax_downsample(points, 60)
    assert all(y is not None and y == y for _, y in kept)


def test_downsampling_refuses_a_window_below_two_points():
    with pytest.raises(ValueError):
        minmax_downsample([(0, 1.0)], 1)


def test_columns_are_downsampled_one_metric_at_a_time_skipping_missing_values():
    rows = [{"step": i, "loss": 4.0 - i / 100} for i in range(1, 501)]
    rows[99]["val_loss"] = 3.1
    rows[199]["val_loss"] = True  # not a number: ignored
    out = downsample_columns(rows, ["loss", "val_loss", "drift"], max_points=100)
    assert len(out["loss"]["x"]) <= 100 and out["loss"]["x"][0] == 1
    assert out["val_loss"] == {"x": [100], "y": [3.1]}
    assert out["drift"] == {"x": [], "y": []}


def test_a_pair_message_gives_one_cell_and_tolerates_missing_figures():
    (cell,) = link_cells({"src": 0, "dst": 1, "step": 7, "bandwidth_bps": 8e8})
    assert (cell.src, cell.dst, cell.bandwidth_bps, cell.latency_s, cell.state) == (
        0,
        1,
        8e8,
        None,
        "ok",
    )


def test_a_probe_matrix_gives_every_off_diagonal_cell():
    data = {
        "step": 3,
        "bandwidth_bps": [[0, 1e9, 2e9], [1e9, 0, 5e8], [2e9, 5e8, 0]],
        "latency_s": [[0, 0.001], [0.002, 0]],  # ragged: what is missing is None
        "state": [["ok", "ok", "degraded"], ["ok", "ok", "down"], ["ok", "ok", "ok"]],
    }
    cells = {(c.src, c.dst): c for c in link_cells(data)}
    assert len(cells) == 6
    assert cells[(0, 2)].state == "degraded" and cells[(1, 2)].state == "down"
    assert cells[(1, 0)].latency_s == 0.002 and cells[(2, 0)].latency_s is None


def test_a_pair_is_reissued_only_when_the_message_says_true():
    (again,) = link_cells({"src": 0, "dst": 1, "reissued": True})
    (once,) = link_cells({"src": 0, "dst": 1})
    (odd,) = link_cells({"src": 0, "dst": 1, "reissued": "false"})
    assert (again.reissued, once.reissued, odd.reissued) == (True, False, False)


def test_a_probe_matrix_may_carry_reissued_as_a_matrix_or_omit_it():
    bandwidth = [[0, 1e9, 2e9], [1e9, 0, 5e8], [2e9, 5e8, 0]]
    reissued = [[False, False, True], [False, False], [True]]  # ragged: missing is False
    cells = {
        (c.src, c.dst): c for c in link_cells({"bandwidth_bps": bandwidth, "reissued": reissued})
    }
    assert {pair for pair, c in cells.items() if c.reissued} == {(0, 2), (2, 0)}
    assert not any(c.reissued for c in link_cells({"bandwidth_bps": bandwidth}))


def test_the_matrix_marks_reissued_pairs_both_ways_and_leaves_unmeasured_ones_none():
    cells = link_cells({"src": 0, "dst": 1, "bandwidth_bps": 1e9, "reissued": True})
    cells += link_cells({"src": 1, "dst": 2, "bandwidth_bps": 1e9})
    m = link_matrix(cells, world_size=3)
    assert m["reissued"] == [[None, True, None], [True, None, False], [None, False, None]]


def test_an_unknown_state_is_not_reported_as_healthy():
    (cell,) = link_cells({"src": 0, "dst": 1, "state": "wobbly"})
    assert cell.state == "degraded"


def test_a_message_without_links_gives_no_cells():
    assert link_cells({"step": 1, "comm_time_s": 0.2}) == []


def test_the_matrix_is_in_page_units_and_grows_to_the_ranks_seen():
    cells = link_cells(
        {"src": 2, "dst": 0, "bandwidth_bps": 1e9, "latency_s": 0.0015, "jitter_s": 0.0002}
    )
    m = link_matrix(cells, world_size=2)
    assert m["ranks"] == [0, 1, 2]
    assert m["bandwidth_mbps"][2][0] == 1000.0
    assert m["latency_ms"][2][0] == 1.5 and m["jitter_ms"][2][0] == 0.2
    assert m["state"][2][0] == "ok" and m["state"][1][2] is None


def test_a_pair_probed_one_way_fills_both_cells_until_the_other_way_is_measured():
    one_way = link_matrix(
        link_cells({"src": 0, "dst": 1, "bandwidth_bps": 1e9, "state": "ok"}), world_size=2
    )
    assert one_way["bandwidth_mbps"][1][0] == 1000.0 and one_way["state"][1][0] == "ok"
    both = link_cells({"src": 0, "dst": 1, "bandwidth_bps": 1e9}) + link_cells(
        {"src": 1, "dst": 0, "bandwidth_bps": 2e8, "state": "degraded"}
    )
    m = link_matrix(both, world_size=2)
    assert (m["bandwidth_mbps"][0][1], m["bandwidth_mbps"][1][0]) == (1000.0, 200.0)
    assert m["state"][1][0] == "degraded"


def test_enhancement_periods_come_from_flags_and_alarms_merged():
    flags = [(1, False), (5, True), (6, True), (9, False), (20, True)]
    assert enhancement_periods(flags) == [(5, 9), (20, None)]
    assert enhancement_periods(flags, [(8, 12), (30, 31)]) == [(5, 12), (20, None)]
    assert enhancement_periods([], [(3, None), (1, 2)]) == [(1, 2), (3, None)]


def test_stacking_counts_each_member_once_per_bucket():
    points = [
        (0.5, "vision", 1, 100.0),
        (1.5, "vision", 1, 200.0),
        (2.0, "vision", 2, 50.0),
        (6.0, "speech", 3, 10.0),
    ]
    out = stack_by_bucket(points, bucket_s=5.0)
    assert out["vision"] == {"x": [0.0, 5.0], "y": [250.0, 0.0]}
    assert out["speech"] == {"x": [0.0, 5.0], "y": [0.0, 10.0]}
