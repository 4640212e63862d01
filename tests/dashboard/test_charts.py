"""Chart building is pure: series in, Plotly figure dicts out."""

from __future__ import annotations

import json

import pytest

from controlplane.dashboard import charts
from controlplane.telemetry.series import link_cells, link_matrix


def history(**series):
    return {name: {"x": list(range(1, len(ys) + 1)), "y": ys} for name, ys in series.items()}


def test_derive_adds_compute_time_and_bandwidth_in_mbit_per_s():
    row = charts.derive(
        {"step_time_s": 0.5, "comm_time_s": 0.2, "allocation_bps": 2e8, "bytes_sent": 1_000_000}
    )
    assert row["compute_time_s"] == pytest.approx(0.3)
    assert row["allocation_mbps"] == 200.0
    assert row["achieved_mbps"] == pytest.approx(40.0)


def test_derive_prefers_exposed_comm_and_reported_bus_bandwidth_and_skips_what_it_cannot_know():
    row = charts.derive(
        {"step_time_s": 0.5, "comm_time_s": 0.4, "exposed_comm_s": 0.1, "busbw_bps": 5e8}
    )
    assert row["compute_time_s"] == pytest.approx(0.4) and row["achieved_mbps"] == 500.0
    assert charts.derive({"loss": 1.0}) == {"loss": 1.0}


def test_the_loss_figure_draws_validation_loss_as_points_and_names_its_live_metrics():
    fig = charts.loss_figure(history(loss=[3.0, 2.5, 2.0], val_loss=[2.7]))
    assert [t["name"] for t in fig["data"]] == ["train loss", "validation loss"]
    assert fig["data"][0]["y"] == [3.0, 2.5, 2.0] and fig["data"][1]["mode"] == "markers"
    assert fig["meta"]["live"] == ["loss", "val_loss"]
    json.dumps(fig)  # goes to the page as JSON


def test_throughput_puts_tokens_on_a_second_axis():
    fig = charts.throughput_figure(history(samples_per_s=[10.0], tokens_per_s=[640.0]))
    assert fig["data"][1]["yaxis"] == "y2" and fig["layout"]["yaxis2"]["side"] == "right"


def test_missing_series_draw_empty_traces_not_errors():
    for build in (charts.step_time_figure, charts.bandwidth_figure, charts.loss_figure):
        fig = build({})
        assert all(t["x"] == [] for t in fig["data"])


def test_the_drift_figure_has_a_threshold_line_and_shaded_periods_open_ones_to_the_last_step():
    fig = charts.drift_figure(
        history(drift=[0.01, 0.2, 0.3, 0.02]), threshold=0.05, periods=[(2, 3), (4, None)]
    )
    rects = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    (line,) = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert [(r["x0"], r["x1"]) for r in rects] == [(2, 3), (4, 4)]
    assert line["y0"] == line["y1"] == 0.05
    assert fig["meta"]["threshold"] == 0.05


def test_the_heatmap_colours_cells_by_state_and_labels_them_with_the_chosen_figure():
    cells = link_cells(
        {"src": 0, "dst": 1, "bandwidth_bps": 9e8, "latency_s": 0.002, "state": "degraded"}
    )
    cells += link_cells({"src": 1, "dst": 0, "bandwidth_bps": 1e9, "latency_s": 0.001})
    matrix = link_matrix(cells, world_size=2)
    trace = charts.heatmap_figure(matrix)["data"][0]
    assert trace["z"] == [[None, 1], [0, None]]
    assert trace["text"] == [["", "900"], ["1000", ""]]
    latency = charts.heatmap_figure(matrix, "latency_ms")
    assert latency["data"][0]["text"][0][1] == "2" and latency["meta"]["measured"] == 2
    with pytest.raises(ValueError):
        charts.heatmap_figure(matrix, "colour")


def test_a_reissued_pair_keeps_its_colour_and_is_marked_in_its_label_and_hover_text():
    cells = link_cells({"src": 0, "dst": 1, "bandwidth_bps": 9e8, "reissued": True})
    cells += link_cells({"src": 1, "dst": 0, "bandwidth_bps": 1e9})
    fig = charts.heatmap_figure(link_matrix(cells, world_size=2))
    trace = fig["data"][0]
    assert trace["z"] == [[None, 0], [0, None]]
    assert trace["text"] == [["", "900 ↻"], ["1000", ""]]
    assert trace["customdata"][0][1] == charts.REISSUED_NOTE and trace["customdata"][1][0] == ""
    assert "%{customdata}" in trace["hovertemplate"]
    assert fig["meta"]["reissued"] == 1


def test_stacked_area_has_one_stacked_trace_per_tenant():
    fig = charts.stacked_area_figure(
        "Allocation", "Mbit/s", {"speech": {"x": [1], "y": [2]}, "vision": {"x": [1], "y": [3]}}
    )
    assert [t["name"] for t in fig["data"]] == ["speech", "vision"]
    assert {t["stackgroup"] for t in fig["data"]} == {"one"}


def test_topology_colours_links_by_health_and_skips_unknown_nodes():
    nodes = [
        {"name": "a", "slots": 4, "used": 2, "link_state": "down", "state": "ready"},
        {"name": "b", "slots": 4, "used": 0, "state": "cordoned"},
    ]
    links = [{"a": "a", "b": "b", "state": "degraded"}, {"a": "a", "b": "zzz", "state": "ok"}]
    fig = charts.topology_figure(nodes, links)
    lines = [t for t in fig["data"] if t["mode"] == "lines"]
    assert len(lines) == 1 and lines[0]["line"]["color"] == charts.HEALTH_COLOURS["degraded"]
    assert fig["data"][-1]["text"] == ["a (2/4 slots)", "b (0/4 slots, cordoned)"]
    assert fig["data"][-1]["marker"]["color"][0] == charts.HEALTH_COLOURS["down"]


def test_usage_bars_show_percent_of_nominal_with_borrowing_on_top():
    fig = charts.usage_bars(
        [("slots", 6, 4, 2), ("bandwidth", 250.0, 1000.0, 0.0), ("idle", 0, 0, 0)], title="Use"
    )
    used, borrowed, free = fig["data"]
    assert (
        used["x"] == [100.0, 25.0, 0.0]
        and borrowed["x"] == [50.0, 0.0, 0.0]
        and free["x"] == [0.0, 75.0, 0.0]
    )
    assert used["text"][0] == "6 / 4"
