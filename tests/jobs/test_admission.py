from __future__ import annotations

import pytest

from controlplane.jobs.choices import PriorityClass
from controlplane.jobs.models import Job
from controlplane.jobs.services import jobs_admit, job_submit, queue_position
from controlplane.jobs.spec import JobSpec


def submit(tenant, actor, *, ranks: int, priority: int = PriorityClass.NORMAL, name: str = "j") -> Job:
    spec = JobSpec(name=name, workload="tiny_gpt", world_size=ranks, steps=5, priority=priority)
    return job_submit(tenant=tenant, spec=spec, actor=actor)


def statuses(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=j.pk).status for j in jobs]


def test_it_admits_jobs_that_fit_the_tenant_quota(vision, alice):
    a, b = submit(vision, alice, ranks=2), submit(vision, alice, ranks=2)
    assert {j.pk for j in jobs_admit()} == {a.pk, b.pk}
    assert statuses(a, b) == ["admitted", "admitted"]


def test_it_rejects_a_job_over_the_tenant_quota_with_a_reason(vision, alice):
    first, second = submit(vision, alice, ranks=3), submit(vision, alice, ranks=2)
    jobs_admit()
    assert statuses(first, second) == ["admitted", "queued"]
    assert Job.objects.get(pk=second.pk).status_reason == "waiting: tenant vision at 3/4 slots"


def test_a_head_that_does_not_fit_blocks_the_rest_of_its_queue(vision, alice):
    submit(vision, alice, ranks=3)
    jobs_admit()
    big, small = submit(vision, alice, ranks=2, name="big"), submit(vision, alice, ranks=1, name="small")
    jobs_admit()
    assert statuses(big, small) == ["queued", "queued"]
    assert "behind an earlier job" in Job.objects.get(pk=small.pk).status_reason


def test_higher_priority_is_admitted_first(vision, alice):
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    high = submit(vision, alice, ranks=4, priority=PriorityClass.HIGH)
    jobs_admit()
    assert statuses(low, high) == ["queued", "admitted"]


def test_one_tenants_full_quota_does_not_block_another(vision, speech, alice, bob, settings):
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    submit(vision, alice, ranks=4)
    jobs_admit()
    waiting = submit(vision, alice, ranks=1)
    other = submit(speech, bob, ranks=2)
    jobs_admit()
    assert statuses(waiting, other) == ["queued", "admitted"]


def test_the_cluster_capacity_bounds_admission(vision, speech, alice, bob, settings):
    settings.SYNCLANE_CLUSTER_SLOTS = 4
    submit(vision, alice, ranks=3)
    jobs_admit()
    other = submit(speech, bob, ranks=2)
    jobs_admit()
    assert Job.objects.get(pk=other.pk).status_reason == "waiting: cluster has 1 free slots, needs 2"


def test_queue_position_counts_jobs_ahead_by_priority_then_time(vision, alice):
    vision.slot_quota = 0
    vision.save()
    first = submit(vision, alice, ranks=1)
    second = submit(vision, alice, ranks=1)
    urgent = submit(vision, alice, ranks=1, priority=PriorityClass.CRITICAL)
    assert [queue_position(j) for j in (urgent, first, second)] == [1, 2, 3]


@pytest.mark.parametrize("status", ["running", "cancelled"])
def test_only_queued_jobs_have_a_position(vision, alice, status):
    job = submit(vision, alice, ranks=1)
    Job.objects.filter(pk=job.pk).update(status=status)
    job.refresh_from_db()
    assert queue_position(job) is None
