from __future__ import annotations

import datetime as dt

import pytest

from controlplane.jobs.choices import PriorityClass
from controlplane.jobs.spec import JobSpec, SpecError

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def parse(**data):
    base = {"name": "n", "workload": "tiny_gpt", "world_size": 2, "steps": 10}
    return JobSpec.from_input({**base, **data}, now=NOW)


def errors_of(**data) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as info:
        parse(**data)
    return info.value.errors


def test_it_accepts_a_minimal_spec_with_defaults():
    spec = parse()
    assert (spec.sync, spec.priority, spec.deadline, spec.bandwidth_floor_mbps) == (
        "full",
        PriorityClass.NORMAL,
        None,
        0,
    )


def test_it_parses_strings_as_a_form_sends_them():
    spec = parse(world_size="4", steps="100", priority="critical", deadline="2026-01-02T10:00")
    assert spec.world_size == 4 and spec.steps == 100
    assert spec.priority == PriorityClass.CRITICAL
    assert spec.deadline == dt.datetime(2026, 1, 2, 10, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("world_size", 0, "between 1 and"),
        ("world_size", "two", "whole number"),
        ("world_size", 2.5, "whole number"),
        ("steps", -1, "between 1 and"),
        ("workload", "doom", "must be one of"),
        ("sync", "telepathy", "must be one of"),
        ("priority", "urgent", "must be one of"),
        ("deadline", "yesterday", "ISO 8601"),
        ("deadline", "2025-12-31T00:00:00Z", "in the future"),
        ("bandwidth_floor_mbps", -5, "between 0 and"),
        ("hyperparameters", {"lr": 5.0}, "lr must be between"),
        ("hyperparameters", {"warp": 1}, "unknown hyper-parameter"),
        ("hyperparameters", "fast", "must be an object"),
    ],
)
def test_it_names_the_bad_field_and_the_reason(field, value, reason):
    errors = errors_of(**{field: value})
    assert list(errors) == [field]
    assert reason in " ".join(errors[field])


def test_it_reports_every_bad_field_at_once():
    errors = errors_of(name="", world_size=0, steps=0)
    assert set(errors) == {"name", "world_size", "steps"}


def test_a_ceiling_below_the_floor_is_refused():
    errors = errors_of(bandwidth_floor_mbps=500, bandwidth_ceiling_mbps=100)
    assert "at least bandwidth_floor_mbps" in errors["bandwidth_ceiling_mbps"][0]
