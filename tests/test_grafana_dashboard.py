"""docs/grafana/synclane-dashboard.json only draws metrics that /metrics exports, and draws
every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controlplane.telemetry.metrics import REGISTRY

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "synclane-dashboard.json"
# What Prometheus appends to a family's name in its samples.
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


@pytest.fixture
def exported(db, private_redis) -> set[str]:
    """Every sample name the registry can export (families without samples still count)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in SUFFIXES)
    return names


def expressions() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bsynclane_[a-z_]+\b", expr))


def test_every_panel_has_a_title_a_place_and_a_query():
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        assert panel["title"] and panel["targets"], panel
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]


def test_every_expression_names_a_metric_we_export(exported):
    for title, expr in expressions():
        names = metric_names(expr)
        assert names, f"{title}: {expr} names no synclane metric"
        assert names <= exported, f"{title}: {sorted(names - exported)} are not exported"


def test_every_exported_family_is_on_the_dashboard(exported):
    drawn = {
        re.sub(r"(_bucket|_sum|_count|_total)$", "", name)
        for _, expr in expressions()
        for name in metric_names(expr)
    }
    families = {family.name for family in REGISTRY.collect()}
    assert families - drawn == set()
