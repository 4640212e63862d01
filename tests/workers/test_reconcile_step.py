"""reconcile_step itself (what the reconcile task runs): every case once, the total returned.

The cases one by one are in test_reconcile.py.
"""

from __future__ import annotations

import pytest

from controlplane.jobs.models import Job
from workers.supervisor.reconcile import reconcile_step

from .conftest import ago

pytestmark = pytest.mark.django_db(transaction=True)


def requeued(job: Job) -> bool:
    return job.events.filter(to_status="queued").exclude(from_status="queued").exists()


def test_one_step_settles_every_case_and_counts_them(lease_redis, make_job):
    unlaunched = make_job("admitted", admitted_at=ago(3600))
    preempted = make_job("preempted", checkpoint_step=40)
    gone = make_job("succeeded", preempt_requested=True)
    beating = make_job("running", heartbeat_at=ago(0), started_at=ago(120))
    assert reconcile_step() == 3
    # Both went back to the queue (a live worker's next pass may already have readmitted
    # them, so read their history rather than their status).
    assert requeued(unlaunched) and requeued(preempted)
    assert not Job.objects.get(pk=gone.pk).preempt_requested
    assert Job.objects.get(pk=beating.pk).status == "running"


def test_a_second_step_finds_nothing_left_to_settle(lease_redis, make_job):
    make_job("admitted", admitted_at=ago(3600))
    make_job("preempted", checkpoint_step=40)
    assert reconcile_step() == 2
    assert reconcile_step() == 0


def test_a_step_with_nothing_to_settle_returns_zero(lease_redis, make_job):
    make_job("running", heartbeat_at=ago(0), started_at=ago(120))
    make_job("queued")
    assert reconcile_step() == 0
