"""One scheduling pass applied to the database (the decisions come from the pure core)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from controlplane.jobs import adapters
from controlplane.jobs.choices import PriorityClass
from controlplane.jobs.models import Job, Node
from controlplane.jobs.scheduler import schedule_pass
from controlplane.jobs.services import (
    SCHEDULE_PENDING_KEY,
    job_set_priority,
    job_submit,
    queue_position,
    request_schedule,
)
from controlplane.jobs.spec import JobSpec
from controlplane.lib.tasks import clear_pending
from workers.runtime import protocol


def submit(
    tenant, actor, *, ranks: int, priority: int = PriorityClass.NORMAL, name: str = "j", **extra
) -> Job:
    spec = JobSpec(
        name=name, workload="tiny_gpt", world_size=ranks, steps=5, priority=priority, **extra
    )
    return job_submit(tenant=tenant, spec=spec, actor=actor)


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def statuses(*jobs: Job) -> list[str]:
    return [fresh(j).status for j in jobs]


def test_it_admits_jobs_that_fit_the_tenant_quota(vision, alice):
    a, b = submit(vision, alice, ranks=2), submit(vision, alice, ranks=2)
    assert set(schedule_pass().admitted) == {a.pk, b.pk}
    assert statuses(a, b) == ["admitted", "admitted"]
    assert fresh(a).status_reason.startswith("admitted")


def test_it_rejects_a_job_over_the_tenant_quota_with_a_reason_and_position(vision, alice):
    first, second = submit(vision, alice, ranks=3), submit(vision, alice, ranks=2)
    schedule_pass()
    assert statuses(first, second) == ["admitted", "queued"]
    waiting = fresh(second)
    assert waiting.wait_code == "tenant_slots"
    assert waiting.status_reason == "waiting: tenant vision at 3/4 slots, needs 2"
    assert queue_position(waiting) == 1


def test_higher_priority_is_admitted_first(vision, alice):
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    high = submit(vision, alice, ranks=4, priority=PriorityClass.HIGH)
    schedule_pass()
    assert statuses(low, high) == ["queued", "admitted"]


def test_a_critical_job_asks_a_running_low_job_of_its_tenant_to_stop(vision, alice):
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    schedule_pass()
    Job.objects.filter(pk=low.pk).update(status="running")
    critical = submit(vision, alice, ranks=4, priority=PriorityClass.CRITICAL)

    result = schedule_pass()

    assert result.preempted == [low.pk] and result.admitted == [critical.pk]
    assert fresh(low).preempt_requested and fresh(low).status == "running"
    # The admitted job's launch waits for its victim to release the slots.
    assert fresh(critical).placement == {"waits_for": [low.pk]}
    assert fresh(low).events.filter(reason__startswith="preemption requested").exists()


def test_a_job_asked_to_stop_is_not_preempted_twice(vision, alice):
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    schedule_pass()
    Job.objects.filter(pk=low.pk).update(status="running")
    submit(vision, alice, ranks=4, priority=PriorityClass.CRITICAL)
    schedule_pass()
    assert schedule_pass().preempted == []


def test_one_tenants_full_quota_does_not_block_another(vision, speech, alice, bob, settings):
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    submit(vision, alice, ranks=4)
    schedule_pass()
    waiting = submit(vision, alice, ranks=1)
    other = submit(speech, bob, ranks=2)
    schedule_pass()
    assert statuses(waiting, other) == ["queued", "admitted"]


def test_capacity_comes_from_live_nodes_once_a_node_registered(vision, alice):
    from django.utils import timezone

    Node.objects.create(name="n1", slots=2, fabric_mbps=1000, last_seen=timezone.now())
    first, second = submit(vision, alice, ranks=2), submit(vision, alice, ranks=2)
    schedule_pass()
    assert statuses(first, second) == ["admitted", "queued"]
    assert fresh(second).wait_code == "cluster_slots"


def test_allocations_are_written_to_jobs_and_to_redis(
    private_redis, vision, alice, django_capture_on_commit_callbacks
):
    job = submit(vision, alice, ranks=2, bandwidth_floor_mbps=100, bandwidth_ceiling_mbps=400)
    with django_capture_on_commit_callbacks(execute=True):
        result = schedule_pass()
    assert result.allocations[job.pk] == pytest.approx(400.0)
    assert fresh(job).allocation_mbps == pytest.approx(400.0)
    assert private_redis.get(protocol.allocation_key(job.pk)) == str(400_000_000)


def test_the_next_pass_restores_allocations_that_a_redis_restart_lost(
    private_redis, vision, alice, django_capture_on_commit_callbacks
):
    job = submit(vision, alice, ranks=2, bandwidth_floor_mbps=100, bandwidth_ceiling_mbps=400)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass()
    private_redis.flushdb()  # what a restart of a Redis without persistence leaves

    with django_capture_on_commit_callbacks(execute=True):
        result = schedule_pass()  # nothing changed in the database

    assert result.allocations[job.pk] == pytest.approx(400.0)
    assert private_redis.get(protocol.allocation_key(job.pk)) == str(400_000_000)


def test_a_job_that_ends_releases_its_allocation(
    private_redis, vision, alice, django_capture_on_commit_callbacks
):
    job = submit(vision, alice, ranks=2)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass()
    Job.objects.filter(pk=job.pk).update(status="succeeded")
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass()
    assert fresh(job).allocation_mbps is None
    assert private_redis.get(protocol.allocation_key(job.pk)) is None


def test_higher_priority_gets_more_bandwidth_on_a_shared_fabric(vision, alice, settings):
    settings.SYNCLANE_NODE_FABRIC_MBPS = 300
    vision.bandwidth_quota_mbps = 300
    vision.save()
    low = submit(vision, alice, ranks=1, priority=PriorityClass.LOW)
    high = submit(vision, alice, ranks=1, priority=PriorityClass.HIGH)
    alloc = schedule_pass().allocations
    assert alloc[low.pk] + alloc[high.pk] == pytest.approx(300)
    assert alloc[high.pk] == pytest.approx(3 * alloc[low.pk])


def test_changing_priority_is_recorded(vision, alice):
    job = submit(vision, alice, ranks=1)
    job_set_priority(job=job, priority=PriorityClass.HIGH, actor=alice)
    assert fresh(job).priority_name == "high"
    assert fresh(job).events.filter(reason="priority normal → high", actor=alice).exists()
    with pytest.raises(ValueError):
        job_set_priority(job=job, priority=7, actor=alice)


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
    assert queue_position(fresh(job)) is None


def test_a_tenant_without_bandwidth_quota_still_gets_a_trickle(vision, alice, settings):
    vision.bandwidth_quota_mbps = 0
    vision.save()
    job = submit(vision, alice, ranks=1)
    assert schedule_pass().allocations[job.pk] == settings.SYNCLANE_MIN_ALLOCATION_MBPS


def test_a_preempted_job_counts_its_eviction_and_when_it_happened(vision, alice):
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    schedule_pass()
    Job.objects.filter(pk=low.pk).update(status="running")
    submit(vision, alice, ranks=4, priority=PriorityClass.CRITICAL)
    schedule_pass()
    assert fresh(low).evictions == 1 and fresh(low).evicted_at is not None


def test_a_job_within_the_minimum_run_time_is_protected_from_a_high_job(vision, alice, settings):
    settings.SYNCLANE_MIN_RUN_TIME_S = 3600
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    schedule_pass()
    Job.objects.filter(pk=low.pk).update(status="running")
    high = submit(vision, alice, ranks=4, priority=PriorityClass.HIGH)
    assert schedule_pass().preempted == []
    critical = submit(vision, alice, ranks=4, priority=PriorityClass.CRITICAL)
    result = schedule_pass()
    assert result.preempted == [low.pk] and result.admitted == [critical.pk]
    assert fresh(high).status == "queued"


def test_an_evicted_job_backs_off_before_it_is_admitted_again(vision, alice, settings):
    settings.SYNCLANE_BACKOFF_BASE_S = 600
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    schedule_pass()
    critical = submit(vision, alice, ranks=4, priority=PriorityClass.CRITICAL)
    schedule_pass()  # low was only admitted: straight back to the queue, evicted once
    Job.objects.filter(pk=critical.pk).update(status="cancelled")
    assert schedule_pass().admitted == []
    assert fresh(low).wait_code == "backoff"


def test_a_queue_whose_policy_is_never_preempts_nothing(vision, alice):
    assert vision.queues.filter(name="default").update(preemption="never") == 1
    low = submit(vision, alice, ranks=4, priority=PriorityClass.LOW)
    schedule_pass()
    Job.objects.filter(pk=low.pk).update(status="running")
    submit(vision, alice, ranks=4, priority=PriorityClass.CRITICAL)
    assert schedule_pass().preempted == []


def test_the_snapshot_carries_checkpoint_interval_admission_time_and_evictions(vision, alice):
    job = submit(vision, alice, ranks=2, hyperparameters={"checkpoint_every": 10})
    schedule_pass()
    started = timezone.now() - dt.timedelta(seconds=20)
    Job.objects.filter(pk=job.pk).update(
        status="running", started_at=started, last_step=40, evictions=2
    )
    (running,) = adapters.snapshot().running
    assert running.checkpoint_interval_s == pytest.approx(5.0, rel=0.05)  # 10 steps at 2/s
    assert running.started_at == fresh(job).admitted_at.timestamp()
    assert running.evictions == 2


def test_a_burst_of_schedule_requests_queues_one_pass_until_it_starts(
    db, private_redis, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            request_schedule()
    assert private_redis.llen("control") == 1
    clear_pending(SCHEDULE_PENDING_KEY)  # what the pass does first
    with django_capture_on_commit_callbacks(execute=True):
        request_schedule()
    assert private_redis.llen("control") == 2


def test_the_snapshot_reads_the_same_number_of_queries_however_long_the_queue(
    vision, alice, django_assert_max_num_queries
):
    # Each pass reads every queued job; a column its request needs but the query left out
    # would cost one more query per job (the queue's length, every pass).
    for n in range(3):
        submit(vision, alice, ranks=1, name=f"a{n}", hyperparameters={"checkpoint_every": 5})
    with django_assert_max_num_queries(20) as few:
        adapters.snapshot()
    for n in range(30):
        submit(vision, alice, ranks=1, name=f"b{n}", node_selector={"zone": "a"})
    with django_assert_max_num_queries(len(few.captured_queries)):
        snapshot = adapters.snapshot()
    # ... and the requests are what the whole rows give.
    whole = {str(j.pk): adapters.job_request(j) for j in Job.objects.filter(status="queued")}
    assert {r.id: r for r in snapshot.pending} == whole
    assert len(whole) == 33
