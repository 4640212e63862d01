"""Pure helpers over reported numbers: downsampling, link matrices, enhancement periods.

Stdlib only (no Django), so they are tested and benchmarked on their own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

Point = tuple[float, float | None]

LINK_FIELDS = ("bandwidth_bps", "latency_s", "jitter_s")
# Health states, worst last: a cell shows the worst state seen for its pair.
LINK_STATES = ("ok", "degraded", "down")


def minmax_downsample(points: Sequence[Point], max_points: int) -> list[Point]:
    """Return at most ``max_points`` of ``points`` (sorted by x), keeping spikes.

    The x range is cut into ``max_points // 2`` buckets of equal point count; each
    bucket contributes its minimum and its maximum (in x order), so a one-step spike
    survives where averaging would flatten it. Points whose y is None are gaps and are
    dropped. A series already short enough is returned unchanged (gaps included).
    """
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    if len(points) <= max_points:
        return list(points)
    values = [p for p in points if p[1] is not None and math.isfinite(p[1])]
    if len(values) <= max_points:
        return values
    buckets = max_points // 2
    size = len(values) / buckets
    out: list[Point] = []
    for b in range(buckets):
        chunk = values[int(b * size) : int((b + 1) * size)]
        if not chunk:
            continue
        lo = min(chunk, key=lambda p: p[1])  # type: ignore[arg-type, return-value]
        hi = max(chunk, key=lambda p: p[1])  # type: ignore[arg-type, return-value]
        out.extend(sorted({lo, hi}, key=lambda p: p[0]))
    return out


def downsample_columns(
    rows: Sequence[Mapping[str, Any]], fields: Iterable[str], *, x: str = "step", max_points: int
) -> dict[str, dict[str, list[Any]]]:
    """Return ``{field: {"x": [...], "y": [...]}}`` for each field, each downsampled alone.

    Rows lacking a field (or holding a non-number) do not contribute a point for it:
    runs report some figures only on some steps (validation loss, drift).
    """
    out: dict[str, dict[str, list[Any]]] = {}
    for name in fields:
        points: list[Point] = [
            (float(r[x]), float(r[name]))
            for r in rows
            if _number(r.get(name)) and _number(r.get(x))
        ]
        kept = minmax_downsample(points, max_points)
        out[name] = {"x": [_int_if_whole(p[0]) for p in kept], "y": [p[1] for p in kept]}
    return out


@dataclass(frozen=True)
class LinkCell:
    """The latest measurement of the path from rank ``src`` to rank ``dst``.

    ``reissued``: the first probe of the pair was slower than the jitter threshold, so the
    pair was probed once more and the better result is the one reported.
    """

    src: int
    dst: int
    bandwidth_bps: float | None
    latency_s: float | None
    jitter_s: float | None
    state: str
    step: int | None
    reissued: bool = False


def link_cells(data: Mapping[str, Any]) -> list[LinkCell]:
    """Return the cells a ``link`` message carries; [] when it carries none.

    Two shapes are accepted, both from ``workers.runtime.reporter``: one pair
    (``src``, ``dst``, ``bandwidth_bps``, ``latency_s``, ``jitter_s``, ``state``,
    ``reissued``) or a probe matrix (``bandwidth_bps``/``latency_s``/``jitter_s`` as
    rank × rank lists, and ``state`` and ``reissued`` each as a matrix or one value).
    Missing figures are None; unknown states read as "ok" only when absent, else as
    "degraded" (unknown is not healthy); ``reissued`` is True only when it says true.
    """
    step = _opt_int(data.get("step"))
    if "src" in data and "dst" in data:
        src, dst = _opt_int(data.get("src")), _opt_int(data.get("dst"))
        if src is None or dst is None:
            return []
        return [
            LinkCell(
                src=src,
                dst=dst,
                bandwidth_bps=_opt_float(data.get("bandwidth_bps")),
                latency_s=_opt_float(data.get("latency_s")),
                jitter_s=_opt_float(data.get("jitter_s")),
                state=_state(data.get("state")),
                step=step,
                reissued=_flag(data.get("reissued")),
            )
        ]
    matrices: dict[str, list[Any]] = {
        f: data[f] for f in LINK_FIELDS if isinstance(data.get(f), list)
    }
    if not matrices:
        return []
    n = max(len(m) for m in matrices.values())
    states, reissued = data.get("state"), data.get("reissued")
    cells = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            figures = {f: _opt_float(_at(m, i, j)) for f, m in matrices.items()}
            state = _at(states, i, j) if isinstance(states, list) else states
            again = _at(reissued, i, j) if isinstance(reissued, list) else reissued
            cells.append(
                LinkCell(
                    src=i,
                    dst=j,
                    bandwidth_bps=figures.get("bandwidth_bps"),
                    latency_s=figures.get("latency_s"),
                    jitter_s=figures.get("jitter_s"),
                    state=_state(state),
                    step=step,
                    reissued=_flag(again),
                )
            )
    return cells


def link_matrix(cells: Iterable[LinkCell], world_size: int) -> dict[str, Any]:
    """Return rank × rank matrices (``bandwidth_mbps``, ``latency_ms``, ``jitter_ms``,
    ``state``, ``reissued``).

    Unmeasured cells (and the diagonal) are None, in ``reissued`` too (unmeasured is not
    "measured once"); a pair measured one way only shows in both cells. Cells outside
    ``world_size`` widen it: the run knows its ranks better than a stale spec.
    """
    cells = list(cells)
    n = max([world_size, *[max(c.src, c.dst) + 1 for c in cells]])
    empty: list[list[Any]] = [[None] * n for _ in range(n)]
    out: dict[str, Any] = {
        "ranks": list(range(n)),
        "bandwidth_mbps": [row[:] for row in empty],
        "latency_ms": [row[:] for row in empty],
        "jitter_ms": [row[:] for row in empty],
        "state": [row[:] for row in empty],
        "reissued": [row[:] for row in empty],
    }
    direct = {(c.src, c.dst) for c in cells}
    # A probe times a round trip, so it measures the pair both ways: a pair probed one way
    # only (the runtime probes src < dst) fills its mirror cell too.
    mirrored = [replace(c, src=c.dst, dst=c.src) for c in cells if (c.dst, c.src) not in direct]
    for c in [*mirrored, *cells]:
        out["bandwidth_mbps"][c.src][c.dst] = _scaled(c.bandwidth_bps, 1e-6)
        out["latency_ms"][c.src][c.dst] = _scaled(c.latency_s, 1e3)
        out["jitter_ms"][c.src][c.dst] = _scaled(c.jitter_s, 1e3)
        out["state"][c.src][c.dst] = c.state
        out["reissued"][c.src][c.dst] = c.reissued
    return out


def enhancement_periods(
    flags: Sequence[tuple[int, bool]], alarms: Iterable[tuple[int | None, int | None]] = ()
) -> list[tuple[int, int | None]]:
    """Return ``[(start_step, end_step or None while open), ...]`` of sync enhancement.

    ``flags`` are (step, sync_enhanced) from metrics, in step order; ``alarms`` are
    (raised step, cleared step) of sync_drift alarms. Both sources are merged so a
    period shows even when downsampling dropped the steps that carried its flag.
    """
    periods: list[tuple[int, int | None]] = []
    start: int | None = None
    for step, on in flags:
        if on and start is None:
            start = step
        elif not on and start is not None:
            periods.append((start, step))
            start = None
    if start is not None:
        periods.append((start, None))
    for raised, cleared in alarms:
        if raised is not None:
            periods.append((raised, cleared))
    return _merge(periods)


def _merge(periods: list[tuple[int, int | None]]) -> list[tuple[int, int | None]]:
    inf = math.inf
    merged: list[tuple[int, int | None]] = []
    for start, end in sorted(periods, key=lambda p: p[0]):
        if merged:
            prev_start, prev_end = merged[-1]
            if prev_end is None or start <= prev_end:
                far = max(inf if prev_end is None else prev_end, inf if end is None else end)
                merged[-1] = (prev_start, None if far == inf else int(far))
                continue
        merged.append((start, end))
    return merged


def _at(matrix: Any, i: int, j: int) -> Any:
    try:
        return matrix[i][j]
    except (IndexError, TypeError, KeyError):
        return None


def _state(value: Any) -> str:
    if value is None:
        return "ok"
    text = str(value)
    return text if text in LINK_STATES else "degraded"


def _flag(value: Any) -> bool:
    # Only a JSON true counts: a stray "false" string or a 1 is not a claim of a re-probe.
    return value is True


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _opt_float(value: Any) -> float | None:
    return float(value) if _number(value) else None


def _opt_int(value: Any) -> int | None:
    return int(value) if _number(value) else None


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else round(value * factor, 6)


def _int_if_whole(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def stack_by_bucket(
    points: Iterable[tuple[float, str, Any, float]], *, bucket_s: float
) -> dict[str, dict[str, list[float]]]:
    """Sum per group and time bucket: ``{group: {"x": [bucket start], "y": [sum]}}``.

    ``points`` are (unix time, group, member, value), e.g. (ts, tenant, job, Mbit/s). In
    each bucket a member counts once, with its last value, so a job reporting ten times a
    bucket is not counted ten times. Every group gets every bucket (0 where silent), as a
    stacked area needs aligned x values.
    """
    last: dict[tuple[float, str, Any], float] = {}
    for ts, group, member, value in sorted(points, key=lambda p: p[0]):
        start = math.floor(ts / bucket_s) * bucket_s
        last[(start, group, member)] = value
    buckets = sorted({k[0] for k in last})
    groups = sorted({k[1] for k in last})
    sums = {(b, g): 0.0 for b in buckets for g in groups}
    for (b, g, _), value in last.items():
        sums[(b, g)] += value
    return {g: {"x": list(buckets), "y": [round(sums[(b, g)], 6) for b in buckets]} for g in groups}
