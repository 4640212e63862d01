"""Each vocabulary has one source; where another layer keeps a copy, these tests tie the two."""

from __future__ import annotations

import re
from pathlib import Path

from controlplane import scheduling as core
from controlplane.dashboard import charts
from controlplane.jobs.choices import DEFAULT_QUEUE_POLICY, PriorityClass, QueuePolicy, SyncStrategy
from controlplane.jobs.models import Queue
from controlplane.telemetry.models import AlarmKind
from workers.runtime import protocol


def test_jobs_offer_exactly_the_sync_strategies_the_runtime_accepts() -> None:
    assert tuple(SyncStrategy.values) == protocol.SYNC_STRATEGIES


def test_every_alarm_kind_a_run_sends_can_be_stored() -> None:
    run_kinds = set(protocol.ALARM_KINDS)
    assert run_kinds <= set(AlarmKind.values)
    assert set(AlarmKind.values) - run_kinds == {AlarmKind.QUOTA}


def test_priority_classes_are_the_scheduling_cores_with_its_names_as_labels() -> None:
    assert [(c.value, c.label) for c in PriorityClass] == [
        (c.value, core.PriorityClass.label(c.value)) for c in core.PriorityClass
    ]


def test_queue_policies_are_the_scheduling_cores_with_one_default() -> None:
    assert QueuePolicy.values == [p.value for p in core.QueuePolicy]
    assert DEFAULT_QUEUE_POLICY == core.DEFAULT_QUEUE_POLICY
    assert Queue._meta.get_field("policy").default == core.DEFAULT_QUEUE_POLICY
    assert core.TenantQuota(name="t", nominal_slots=1, nominal_bandwidth_bps=1.0).queue_policy == (
        core.DEFAULT_QUEUE_POLICY
    )


def test_trace_files_may_use_kueues_names_for_queue_policies() -> None:
    assert core.QueuePolicy("StrictFIFO") is core.QueuePolicy.STRICT_FIFO
    assert core.QueuePolicy("BestEffortFIFO") is core.QueuePolicy.BEST_EFFORT_FIFO


REPORTED = set(
    protocol.WORKLOAD_FIGURES
    + protocol.COMM_FIGURES
    + protocol.LINK_FIGURES
    + protocol.STRATEGY_FIGURES
)
JOB_JS = Path(charts.__file__).parent / "static" / "synclane" / "job.js"


def test_the_job_pages_metrics_are_figures_a_run_reports_or_derived_from_them() -> None:
    assert set(charts.JOB_METRICS) <= REPORTED | set(charts.DERIVED)
    assert not set(charts.DERIVED) & REPORTED


def test_derive_reads_reported_figures_and_adds_exactly_the_derived_ones() -> None:
    source = Path(charts.__file__).read_text()
    body = source[source.index("def derive(") : source.index("def line_figure(")]
    read = set(re.findall(r'data\.get\("(\w+)"\)', body))
    assert read and read <= REPORTED, read - REPORTED
    everything = {name: 1.0 for name in read}
    assert set(charts.derive(everything)) - set(everything) == set(charts.DERIVED)


def test_the_pages_script_derives_the_same_figures_from_the_same_names() -> None:
    script = JOB_JS.read_text()
    body = script[script.index("function derive(") : script.index("return out;")]
    read = set(re.findall(r"\bd\.(\w+)", body))
    assert read and read <= REPORTED, read - REPORTED
    assert set(re.findall(r"\bout\.(\w+)\s*=", body)) == set(charts.DERIVED)
