"""The pass's queues kept between passes (jobs.queue_state): the change feed the triggers
write, and a pass that reads only what changed deciding what a pass from scratch decides."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from controlplane import scheduling as core
from controlplane.jobs import adapters, queue_state
from controlplane.jobs.choices import PriorityClass
from controlplane.jobs.models import Job, Queue, QueueChange
from controlplane.jobs.scheduler import schedule_pass
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.tenancy.models import Tenant

# Real commits: a pass is built on only once its transaction commits.
pytestmark = pytest.mark.django_db(transaction=True)

PRIORITIES = [PriorityClass.LOW, PriorityClass.NORMAL, PriorityClass.HIGH, PriorityClass.CRITICAL]


@pytest.fixture
def fresh_state():
    """This process's queue state, forgotten before and after the test."""
    state = queue_state.current()
    state.reset()
    yield state
    state.reset()


def submit(tenant: Tenant, *, ranks: int = 1, priority: int = PriorityClass.NORMAL) -> Job:
    spec = JobSpec(name="j", workload="noop", world_size=ranks, steps=5, priority=priority)
    return job_submit(tenant=tenant, spec=spec, actor=None)


def feed() -> list[int]:
    return list(QueueChange.objects.order_by("pk").values_list("job_id", flat=True))


def test_the_feed_names_queued_jobs_inserted_changed_and_deleted(vision):
    job = submit(vision)
    first = job.pk
    Job.objects.filter(pk=job.pk).update(priority=PriorityClass.HIGH)  # a queryset update
    Job.objects.filter(pk=job.pk).update(name="renamed")  # not a column the scheduler reads
    Job.objects.filter(pk=job.pk).update(status="admitted")  # leaves the queue
    Job.objects.filter(pk=job.pk).update(last_step=3)  # not queued, before or after
    job.refresh_from_db()
    job.delete()
    other = submit(vision)
    second = other.pk
    other.delete()
    assert feed() == [first, first, first, second, second]


def test_a_pass_after_the_first_reads_only_the_jobs_that_changed(
    vision, speech, fresh_state, monkeypatch, settings
):
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    for _ in range(60):
        submit(vision, ranks=4)  # one fits the quota; the rest wait
    schedule_pass()
    built = fresh_state.built_at
    requests: list[str] = []
    original = adapters.job_request

    def counting(job: Job) -> core.JobRequest:
        requests.append(str(job.pk))
        return original(job)

    monkeypatch.setattr(adapters, "job_request", counting)
    new = submit(speech, ranks=2)

    result = schedule_pass()

    assert result.admitted == [new.pk]
    assert requests == [str(new.pk)]  # not the 59 jobs still waiting
    assert fresh_state.built_at == built


def test_a_pass_rewrites_the_reasons_of_a_class_only_when_they_changed(
    vision, fresh_state, monkeypatch, settings
):
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    jobs = [submit(vision, ranks=4) for _ in range(40)]
    schedule_pass()  # the first runs; 39 wait with one reason: the quota
    built = fresh_state.built_at
    stored: list[int] = []
    original = queue_state._stored

    def counting(job_id: str, reason: core.WaitReasons) -> tuple[int, str, str]:
        stored.append(int(job_id))
        return original(job_id, reason)

    monkeypatch.setattr(queue_state, "_stored", counting)
    Job.objects.filter(pk=jobs[0].pk).update(status="succeeded")

    assert schedule_pass().admitted == [jobs[1].pk]
    # (StrictFIFO) the new head's reason is its own; the 38 behind it keep theirs.
    assert set(stored) == {jobs[2].pk}
    stored.clear()
    Tenant.objects.filter(pk=vision.pk).update(name="Vision")  # not a quota: no rebuild
    Job.objects.filter(pk=jobs[5].pk).update(priority=PriorityClass.LOW)

    schedule_pass()
    # The head, and the job read anew (in a class of its own now); not the 37 others.
    assert set(stored) == {jobs[2].pk, jobs[5].pk}
    moved = Job.objects.get(pk=jobs[5].pk)
    assert moved.wait_code == "blocked_by_head"
    assert moved.status_reason.startswith("waiting: behind the head of tenant vision's")
    assert fresh_state.built_at == built


def test_a_quota_change_reads_the_queue_again(vision, fresh_state, settings):
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    jobs = [submit(vision, ranks=4) for _ in range(2)]
    schedule_pass()
    built = fresh_state.built_at
    Tenant.objects.filter(pk=vision.pk).update(slot_quota=8)

    assert schedule_pass().admitted == [jobs[1].pk]
    assert fresh_state.built_at > built


def test_a_pass_whose_transaction_rolled_back_is_not_built_on(vision, fresh_state, settings):
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    waiting = [submit(vision, ranks=4) for _ in range(2)]
    schedule_pass()
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.filter(pk=waiting[0].pk).update(status="succeeded")
        assert schedule_pass().admitted == [waiting[1].pk]
        raise RuntimeError("roll back the end and the admission")
    # The queues of the rolled-back pass held the admission; the database does not.
    assert Job.objects.get(pk=waiting[1].pk).status == "queued"
    Job.objects.filter(pk=waiting[0].pk).update(status="succeeded")

    assert schedule_pass().admitted == [waiting[1].pk]


@pytest.mark.parametrize("seed", range(8))
def test_passes_that_read_only_what_changed_decide_as_passes_from_scratch(
    seed, fresh_state, settings
):
    """Random submits, starts, ends, requeues, cancels, priority and quota changes on three
    tenants sharing a cohort: after each, the pass (from the kept queues) admits, preempts,
    allocates and explains what a pass from scratch over the same rows would. With odd seeds
    an evicted job backs off for an hour (no back-off ends inside the test: the two passes'
    clocks differ by a few milliseconds), so requeued victims wait in back-off."""
    settings.SYNCLANE_CLUSTER_SLOTS = 10
    settings.SYNCLANE_BACKOFF_BASE_S = 3600.0 if seed % 2 else 0.0
    settings.SYNCLANE_BACKOFF_MAX_S = 7200.0
    rng = random.Random(seed)
    tenants = []
    for name, quota in [("ada", 2), ("bea", 3), ("cy", 4)]:
        tenant = Tenant.objects.create(slug=name, name=name, slot_quota=quota, cohort="lab")
        Queue.objects.create(tenant=tenant, name="default")
        tenants.append(tenant)
    rebuilds, passes = 0, 0
    for _ in range(40):
        _random_change(rng, tenants)
        now = timezone.now()
        expected = core.schedule(adapters.snapshot(), now.timestamp())
        built = fresh_state.built_at

        result = schedule_pass()

        passes += 1
        rebuilds += fresh_state.built_at != built
        assert sorted(result.admitted) == sorted(int(a.job_id) for a in expected.admissions)
        assert sorted(result.preempted) == sorted(int(p.job_id) for p in expected.preemptions)
        assert result.allocations.keys() == {int(j) for j in expected.allocations}
        # Codes match for every waiting job. (The sentence of a tenant not looked at may
        # keep an old figure, such as what its cohort can lend, until it is looked at again
        # or the queues are read again.)
        codes = {int(w.job_id): str(w.code) for w in expected.waiting.values()}
        # (A victim not yet launched is back in the queue at once, explained next pass.)
        queued = Job.objects.filter(status="queued").exclude(pk__in=result.preempted)
        assert dict(queued.values_list("pk", "wait_code")) == codes
    # Most passes caught up from the feed (quota changes read the queue again).
    assert rebuilds < passes / 2


def _random_change(rng: random.Random, tenants: list[Tenant]) -> None:
    jobs = list(Job.objects.values_list("pk", "status", "preempt_requested"))
    queued = [pk for pk, status, _ in jobs if status == "queued"]
    admitted = [pk for pk, status, _ in jobs if status == "admitted"]
    running = [pk for pk, status, asked in jobs if status == "running" and not asked]
    stopping = [pk for pk, status, asked in jobs if status == "running" and asked]
    choices = ["submit"] * 4 + ["start", "end", "requeue", "cancel", "priority", "progress"]
    choices += ["quota"] if rng.random() < 0.2 else []
    match rng.choice(choices):
        case "submit":
            for _ in range(rng.randint(1, 4)):
                submit(
                    rng.choice(tenants), ranks=rng.randint(1, 4), priority=rng.choice(PRIORITIES)
                )
        case "start" if admitted:
            Job.objects.filter(pk__in=admitted).update(status="running", started_at=timezone.now())
        case "end" if running:
            Job.objects.filter(pk=rng.choice(running)).update(status="succeeded")
        case "requeue" if stopping:  # the supervisor checkpointed a victim and requeued it
            Job.objects.filter(pk=rng.choice(stopping)).update(
                status="queued", preempt_requested=False, last_step=2
            )
        case "cancel" if queued:
            Job.objects.filter(pk=rng.choice(queued)).update(status="cancelled")
        case "priority" if queued:
            Job.objects.filter(pk=rng.choice(queued)).update(priority=rng.choice(PRIORITIES))
        case "progress" if running:
            Job.objects.filter(pk__in=running).update(last_step=rng.randint(1, 4))
        case "quota":
            Tenant.objects.filter(pk=rng.choice(tenants).pk).update(slot_quota=rng.randint(1, 5))
        case _:
            submit(rng.choice(tenants), ranks=rng.randint(1, 4))


def test_a_change_that_commits_after_a_later_one_was_read_is_not_missed(
    vision, speech, fresh_state, settings
):
    """PostgreSQL takes feed ids at insert, so a submit may commit after a later id was read
    by a pass; the next pass still reads it (it reads every entry of a transaction that was
    running at its last read). SQLite commits one writer at a time, in id order."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite commits feed entries in id order")
    settings.SYNCLANE_CLUSTER_SLOTS = 8
    schedule_pass()
    inserted, release = threading.Event(), threading.Event()
    late: list[int] = []

    def slow_submit() -> None:
        try:
            with transaction.atomic():
                late.append(submit(vision, ranks=2).pk)
                inserted.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_submit)
    thread.start()
    assert inserted.wait(30)
    early = submit(speech, ranks=2)  # a later feed id, committed first
    assert schedule_pass().admitted == [early.pk]
    release.set()
    thread.join(30)

    assert schedule_pass().admitted == late
