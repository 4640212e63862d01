from __future__ import annotations

import pytest

from controlplane.jobs import state
from controlplane.jobs.choices import ACTIVE, ALLOWED_TRANSITIONS, TERMINAL, WAITING, JobStatus
from controlplane.jobs.models import Job, JobEvent
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec

ALL = list(JobStatus)


def test_the_state_groups_partition_every_status():
    groups = [WAITING, ACTIVE, TERMINAL]
    assert set().union(*groups) == set(ALL)
    assert sum(len(g) for g in groups) == len(ALL)


def test_terminal_states_have_no_way_out():
    for status in TERMINAL:
        assert ALLOWED_TRANSITIONS[status] == frozenset()


@pytest.mark.parametrize(
    ("current", "to"),
    [
        ("queued", "admitted"),
        ("admitted", "running"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("running", "restarting"),
        ("restarting", "running"),
        ("running", "preempted"),
        ("preempted", "queued"),
        ("queued", "cancelled"),
    ],
)
def test_it_allows_the_documented_lifecycle(current, to):
    assert state.can_transition(current, to)


@pytest.mark.parametrize(
    ("current", "to"),
    [
        ("queued", "running"),
        ("queued", "succeeded"),
        ("succeeded", "running"),
        ("cancelled", "queued"),
        ("failed", "restarting"),
        ("preempted", "running"),
        ("admitted", "succeeded"),
    ],
)
def test_it_refuses_transitions_outside_the_table(current, to):
    assert not state.can_transition(current, to)


@pytest.fixture
def job(vision, alice) -> Job:
    spec = JobSpec(name="t", workload="tiny_gpt", world_size=2, steps=10)
    return job_submit(tenant=vision, spec=spec, actor=alice)


def test_a_transition_updates_the_row_and_writes_an_event(job, alice):
    state.transition(job, "admitted", reason="fits", actor=alice)
    job.refresh_from_db()
    assert job.status == "admitted"
    assert job.admitted_at is not None
    event = JobEvent.objects.filter(job=job).last()
    assert (event.from_status, event.to_status, event.reason, event.actor) == (
        "queued",
        "admitted",
        "fits",
        alice,
    )


def test_a_disallowed_transition_raises_and_writes_nothing(job):
    before = JobEvent.objects.count()
    with pytest.raises(state.TransitionError):
        state.transition(job, "succeeded", reason="nope")
    job.refresh_from_db()
    assert job.status == "queued"
    assert JobEvent.objects.count() == before


def test_a_stale_writer_loses_the_race(job):
    stale = Job.objects.get(pk=job.pk)
    state.transition(job, "cancelled", reason="first")
    with pytest.raises(state.TransitionError, match="no longer queued"):
        state.transition(stale, "admitted", reason="second")
    assert Job.objects.get(pk=job.pk).status == "cancelled"


def test_entering_a_terminal_state_stamps_finished_at(job):
    state.transition(job, "cancelled", reason="bye")
    assert Job.objects.get(pk=job.pk).finished_at is not None


def test_every_admission_renews_admitted_at_but_a_restart_keeps_started_at(job):
    state.transition(job, "admitted", reason="a")
    first_admitted = Job.objects.get(pk=job.pk).admitted_at
    state.transition(job, "running", reason="r")
    started = Job.objects.get(pk=job.pk).started_at
    state.transition(job, "preempted", reason="p")
    state.transition(job, "queued", reason="q")
    state.transition(job, "admitted", reason="again")
    state.transition(job, "running", reason="r2")
    again = Job.objects.get(pk=job.pk)
    assert again.admitted_at > first_admitted
    assert again.started_at == started
