"""Chart building: series in, Plotly figure dicts out. Pure (no Django, no I/O).

A *series* is ``{"x": [...], "y": [...]}``; a *history* maps metric names to series
(see ``telemetry.series.downsample_columns``). Pages draw a figure with
``Plotly.newPlot(el, fig.data, fig.layout)`` and extend trace ``i`` live with the metric
named in ``fig.meta.live[i]``, so the server and the browser agree on which trace is which.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

Series = Mapping[str, Sequence[Any]]
Figure = dict[str, Any]

# Figures ``derive`` adds to what a run reports (job.js ``derive`` adds the same).
DERIVED = ("compute_time_s", "allocation_mbps", "achieved_mbps")
# Metrics the job page keeps a history of: reported names (the runtime protocol's
# WORKLOAD_FIGURES and session figures; tests/test_vocabularies.py ties them) and DERIVED.
JOB_METRICS = (
    "loss",
    "val_loss",
    "samples_per_s",
    "tokens_per_s",
    "comm_time_s",
    "compute_time_s",
    "allocation_mbps",
    "achieved_mbps",
    "drift",
)
STATE_CODES = {"ok": 0, "degraded": 1, "down": 2}
HEALTH_COLOURS = {"ok": "#1f8a4c", "degraded": "#e0a100", "down": "#c2352b", None: "#9aa3b5"}
HEATMAP_METRICS = {
    "bandwidth_mbps": "bandwidth (Mbit/s)",
    "latency_ms": "latency (ms)",
    "jitter_ms": "jitter (ms)",
}
# A re-issued pair (first probe slow, probed again) keeps its colour; its label gets a mark
# and its hover text says why. (job.js drawHeatmap mirrors both.)
REISSUED_MARK = " ↻"
REISSUED_NOTE = " · re-issued (first probe slow, probed again)"


def derive(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``data`` plus the figures the job page draws that a run does not send.

    ``compute_time_s`` = step time minus exposed communication (``exposed_comm_s``, else
    ``comm_time_s``), floored at 0; ``allocation_mbps`` from ``allocation_bps``;
    ``achieved_mbps`` = bits sent / comm time (or ``busbw_bps`` when reported). Figures
    whose inputs are missing are left out. (job.js ``derive`` mirrors this.)
    """
    out = dict(data)
    step_time, comm = _num(data.get("step_time_s")), _num(data.get("comm_time_s"))
    exposed = _num(data.get("exposed_comm_s"))
    if step_time is not None and (exposed is not None or comm is not None):
        out["compute_time_s"] = max(
            0.0, step_time - (exposed if exposed is not None else comm or 0.0)
        )
    if (alloc := _num(data.get("allocation_bps"))) is not None:
        out["allocation_mbps"] = alloc / 1e6
    if (busbw := _num(data.get("busbw_bps"))) is not None:
        out["achieved_mbps"] = busbw / 1e6
    elif (sent := _num(data.get("bytes_sent"))) is not None and comm:
        out["achieved_mbps"] = sent * 8 / comm / 1e6
    return out


def line_figure(
    title: str,
    ytitle: str,
    traces: Sequence[tuple[str, str, Series]],
    *,
    x_title: str = "step",
    y2: Sequence[str] = (),
    markers: Sequence[str] = (),
) -> Figure:
    """Return a line chart: one trace per (metric, label, series).

    Metrics named in ``y2`` go on a right-hand axis; those in ``markers`` are drawn as
    points (sparse figures such as validation loss).
    """
    data = []
    for metric, label, series in traces:
        trace: dict[str, Any] = {
            "type": "scatter",
            "name": label,
            "x": list(series.get("x", [])),
            "y": list(series.get("y", [])),
            "mode": "markers" if metric in markers else "lines",
        }
        if metric in y2:
            trace["yaxis"] = "y2"
        data.append(trace)
    layout = _layout(title, x_title, ytitle)
    if y2:
        layout["yaxis2"] = {
            "title": {"text": _label_of(traces, y2[0])},
            "overlaying": "y",
            "side": "right",
        }
    return {"data": data, "layout": layout, "meta": {"live": [t[0] for t in traces]}}


def loss_figure(history: Mapping[str, Series]) -> Figure:
    return line_figure(
        "Loss",
        "loss",
        [
            ("loss", "train loss", _s(history, "loss")),
            ("val_loss", "validation loss", _s(history, "val_loss")),
        ],
        markers=("val_loss",),
    )


def throughput_figure(history: Mapping[str, Series]) -> Figure:
    return line_figure(
        "Throughput",
        "samples/s",
        [
            ("samples_per_s", "samples/s", _s(history, "samples_per_s")),
            ("tokens_per_s", "tokens/s", _s(history, "tokens_per_s")),
        ],
        y2=("tokens_per_s",),
    )


def step_time_figure(history: Mapping[str, Series]) -> Figure:
    return line_figure(
        "Communication vs computation per step",
        "seconds",
        [
            ("comm_time_s", "communication", _s(history, "comm_time_s")),
            ("compute_time_s", "computation", _s(history, "compute_time_s")),
        ],
    )


def bandwidth_figure(history: Mapping[str, Series]) -> Figure:
    return line_figure(
        "Bandwidth: allocated vs achieved",
        "Mbit/s",
        [
            ("allocation_mbps", "allocated", _s(history, "allocation_mbps")),
            ("achieved_mbps", "achieved", _s(history, "achieved_mbps")),
        ],
    )


def drift_figure(
    history: Mapping[str, Series],
    *,
    threshold: float | None,
    periods: Sequence[tuple[int, int | None]],
) -> Figure:
    """Drift with its threshold as a dashed line and sync-enhancement periods shaded.

    An open period (end None) is drawn up to the last step seen; the page moves its right
    edge as steps arrive.
    """
    series = _s(history, "drift")
    fig = line_figure("Sync drift", "relative drift", [("drift", "drift", series)])
    xs = list(series.get("x", []))
    last = max(xs) if xs else None
    shapes: list[dict[str, Any]] = []
    for start, end in periods:
        right = end if end is not None else (last if last is not None else start)
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": start,
                "x1": right,
                "y0": 0,
                "y1": 1,
                "fillcolor": "rgba(224,161,0,0.18)",
                "line": {"width": 0},
                "layer": "below",
                "name": "open" if end is None else "closed",
            }
        )
    if threshold is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "yref": "y",
                "x0": 0,
                "x1": 1,
                "y0": threshold,
                "y1": threshold,
                "line": {"color": "#c2352b", "dash": "dash", "width": 1.5},
                "name": "threshold",
            }
        )
    fig["layout"]["shapes"] = shapes
    fig["meta"]["threshold"] = threshold
    fig["meta"]["periods"] = [list(p) for p in periods]
    return fig


def heatmap_figure(matrix: Mapping[str, Any], metric: str = "bandwidth_mbps") -> Figure:
    """Rank × rank link health: cells coloured by health state, labelled with ``metric``.

    Unmeasured cells stay blank; re-issued cells are marked (``REISSUED_MARK``, and
    ``REISSUED_NOTE`` on hover). ``matrix`` is ``telemetry.series.link_matrix`` output.
    """
    if metric not in HEATMAP_METRICS:
        raise ValueError(f"unknown heatmap metric {metric!r}")
    ranks = list(matrix.get("ranks", []))
    states = matrix.get("state", [])
    values = matrix.get(metric, [])
    reissued = matrix.get("reissued") or [[None] * len(row) for row in values]
    z = [[STATE_CODES.get(s) if s is not None else None for s in row] for row in states]
    text = [
        [_fmt(v) + (REISSUED_MARK if again else "") for v, again in zip(row, flags, strict=True)]
        for row, flags in zip(values, reissued, strict=True)
    ]
    notes = [[REISSUED_NOTE if again else "" for again in flags] for flags in reissued]
    colours = [HEALTH_COLOURS["ok"], HEALTH_COLOURS["degraded"], HEALTH_COLOURS["down"]]
    trace = {
        "type": "heatmap",
        "x": [f"to {r}" for r in ranks],
        "y": [f"rank {r}" for r in ranks],
        "z": z,
        "text": text,
        "customdata": notes,
        "texttemplate": "%{text}",
        "zmin": 0,
        "zmax": 2,
        "colorscale": [
            [0.0, colours[0]],
            [0.33, colours[0]],
            [0.34, colours[1]],
            [0.66, colours[1]],
            [0.67, colours[2]],
            [1.0, colours[2]],
        ],
        "showscale": False,
        "hovertemplate": "%{y} → %{x}: %{text}%{customdata}<extra></extra>",
        "xgap": 2,
        "ygap": 2,
    }
    layout = _layout(f"Link health · {HEATMAP_METRICS[metric]}", "", "")
    layout["yaxis"] = {"autorange": "reversed"}
    meta = {
        "metric": metric,
        "measured": _count(z),
        "reissued": sum(bool(again) for flags in reissued for again in flags),
    }
    return {"data": [trace], "layout": layout, "meta": meta}


def stacked_area_figure(
    title: str, ytitle: str, stacks: Mapping[str, Series], *, x_title: str = "time"
) -> Figure:
    """One filled, stacked trace per key (e.g. bandwidth allocation by tenant over time)."""
    data = [
        {
            "type": "scatter",
            "name": name,
            "x": list(s.get("x", [])),
            "y": list(s.get("y", [])),
            "stackgroup": "one",
            "mode": "lines",
            "line": {"width": 0.5},
        }
        for name, s in sorted(stacks.items())
    ]
    return {
        "data": data,
        "layout": _layout(title, x_title, ytitle),
        "meta": {"live": sorted(stacks)},
    }


def _node_label(node: Mapping[str, Any]) -> str:
    """``n1 (2/4 slots)``, with the node's state when it takes no new placements."""
    state = node.get("state")
    suffix = f", {state}" if state not in (None, "ready") else ""
    return f"{node['name']} ({node.get('used', 0)}/{node['slots']} slots{suffix})"


def topology_figure(
    nodes: Sequence[Mapping[str, Any]], links: Sequence[Mapping[str, Any]]
) -> Figure:
    """Nodes on a circle, nodes and links coloured by health.

    ``nodes``: ``{"name", "slots", "used", "link_state"}`` (the worst link of its jobs); ``links``:
    ``{"a", "b", "state", "label"}``
    with ``a``/``b`` node names. A link whose ends are unknown is skipped.
    """
    pos = _circle([n["name"] for n in nodes])
    data: list[dict[str, Any]] = []
    for link in links:
        if link["a"] not in pos or link["b"] not in pos:
            continue
        (x0, y0), (x1, y1) = pos[link["a"]], pos[link["b"]]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [x0, x1],
                "y": [y0, y1],
                "showlegend": False,
                "hoverinfo": "text",
                "text": link.get("label", ""),
                "line": {
                    "width": 3,
                    "color": HEALTH_COLOURS.get(link.get("state"), HEALTH_COLOURS[None]),
                },
            }
        )
    data.append(
        {
            "type": "scatter",
            "mode": "markers+text",
            "showlegend": False,
            "textposition": "bottom center",
            "x": [pos[n["name"]][0] for n in nodes],
            "y": [pos[n["name"]][1] for n in nodes],
            "text": [_node_label(n) for n in nodes],
            "marker": {
                "size": 26,
                "color": [HEALTH_COLOURS.get(n.get("link_state"), "#3558d6") for n in nodes],
            },
        }
    )
    layout = _layout("Topology", "", "")
    hidden = {"visible": False, "range": [-1.6, 1.6]}
    layout["xaxis"], layout["yaxis"] = hidden, dict(hidden)
    return {"data": data, "layout": layout, "meta": {}}


def usage_bars(rows: Sequence[tuple[str, float, float, float]], *, title: str) -> Figure:
    """Use against nominal quota, in percent: rows of (label, used, nominal, borrowed).

    Each bar stacks used-within-quota, borrowed (above the nominal share) and free.
    A zero quota counts any use as borrowed.
    """
    labels, within, borrowed, free, text = [], [], [], [], []
    for label, used, nominal, extra in rows:
        labels.append(label)
        within.append(_pct(min(used, nominal), nominal))
        borrowed.append(_pct(extra, nominal))
        free.append(_pct(max(0.0, nominal - used), nominal))
        text.append(f"{used:g} / {nominal:g}")
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "used",
            "y": labels,
            "x": within,
            "text": text,
            "textposition": "inside",
            "marker": {"color": "#3558d6"},
        },
        {
            "type": "bar",
            "orientation": "h",
            "name": "borrowed",
            "y": labels,
            "x": borrowed,
            "marker": {"color": "#e0a100"},
        },
        {
            "type": "bar",
            "orientation": "h",
            "name": "free",
            "y": labels,
            "x": free,
            "marker": {"color": "#e3e6ee"},
        },
    ]
    layout = _layout(title, "% of nominal quota", "")
    layout["barmode"] = "stack"
    layout["margin"]["l"] = 110
    return {"data": data, "layout": layout, "meta": {"text": text}}


def _layout(title: str, x_title: str, y_title: str) -> dict[str, Any]:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "margin": {"l": 55, "r": 45, "t": 40, "b": 40},
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}},
        "legend": {"orientation": "h"},
    }


def _pct(value: float, nominal: float) -> float:
    if not nominal:
        return 100.0 if value else 0.0
    return round(100.0 * value / nominal, 2)


def _s(history: Mapping[str, Series], name: str) -> Series:
    return history.get(name) or {"x": [], "y": []}


def _label_of(traces: Sequence[tuple[str, str, Series]], metric: str) -> str:
    return next((label for m, label, _ in traces if m == metric), metric)


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fmt(value: Any) -> str:
    """Three significant digits, whole numbers from 100 up (no exponents in a cell)."""
    if value is None:
        return ""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _count(z: Sequence[Sequence[Any]]) -> int:
    return sum(1 for row in z for v in row if v is not None)


def _circle(names: Sequence[str]) -> dict[str, tuple[float, float]]:
    n = max(1, len(names))
    if n == 1:
        return {names[0]: (0.0, 0.0)} if names else {}
    return {
        name: (round(math.cos(2 * math.pi * i / n), 4), round(math.sin(2 * math.pi * i / n), 4))
        for i, name in enumerate(names)
    }
