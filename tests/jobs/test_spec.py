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


def test_it_takes_typed_values_as_json_and_a_cleaned_form_give_them():
    spec = parse(world_size=4, steps=100, priority="critical", deadline="2026-01-02T10:00")
    assert spec.world_size == 4 and spec.steps == 100
    assert spec.priority == PriorityClass.CRITICAL
    assert spec.deadline == dt.datetime(2026, 1, 2, 10, tzinfo=dt.UTC)
    aware = dt.datetime(2026, 1, 3, tzinfo=dt.UTC)
    assert parse(deadline=aware).deadline == aware


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
        # Strict types: nothing is coerced into the type the field wants.
        ("name", {"first": "x"}, "must be a string"),
        ("name", ["x"], "must be a string"),
        ("name", "bad\x00name", "control characters"),
        ("world_size", "4", "whole number"),
        ("world_size", 2.0, "whole number"),
        ("world_size", True, "whole number"),
        ("steps", 10**30, "between 1 and"),
        ("workload", ["tiny_gpt"], "must be one of"),
        ("priority", {"high": 1}, "must be one of"),
        ("deadline", "2026-02-30T10:00:00Z", "that exists"),
        ("deadline", "2026-01-02T10:00:00+99:00", "that exists"),
        ("deadline", 1767261600, "ISO 8601"),
        ("bandwidth_ceiling_mbps", 2**31, "between 1 and"),
        ("hyperparameters", {"seed": 1.5}, "seed must be a whole number"),
        ("hyperparameters", {"batch_size": "8"}, "batch_size must be a whole number"),
        ("hyperparameters", {"lr": float("nan")}, "lr must be a number"),
        ("hyperparameters", {"lr": {"value": 0.1}}, "lr must be a number"),
        ("warp_speed", 9, "not a known field"),
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


def test_a_float_learning_rate_accepts_a_whole_number_too():
    assert parse(hyperparameters={"lr": 1}).hyperparameters == {"lr": 1.0}


def test_fields_the_caller_reads_itself_are_not_unknown():
    spec = JobSpec.from_input(
        {"name": "n", "workload": "tiny_gpt", "world_size": 2, "steps": 10, "tenant": "vision"},
        also_known={"tenant"},
    )
    assert spec.name == "n"
