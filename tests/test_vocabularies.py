"""Each vocabulary has one source; where another layer keeps a copy, these tests tie the two."""

from __future__ import annotations

from controlplane import scheduling as core
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
