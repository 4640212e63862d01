"""One supervisor per run: the lease in Redis and the fencing token on the job row."""

from __future__ import annotations

import time

import pytest

from controlplane.jobs import state
from controlplane.jobs.models import Job
from workers.supervisor import lease as leases

pytestmark = pytest.mark.django_db


def test_only_one_supervisor_gets_the_lease_of_a_run(lease_redis, make_job):
    job = make_job("admitted")
    first = leases.acquire(job.pk)
    assert first is not None
    assert leases.acquire(job.pk) is None
    assert leases.holder(job.pk) == first.owner


def test_every_acquisition_raises_the_fence_on_the_job_row(lease_redis, make_job):
    job = make_job("admitted")
    first = leases.acquire(job.pk)
    first.release()
    second = leases.acquire(job.pk)
    assert second.fence == first.fence + 1
    assert Job.objects.get(pk=job.pk).fence == second.fence


def test_a_supervisor_whose_lease_was_taken_over_can_change_nothing(lease_redis, r, make_job):
    job = make_job("running")
    old = leases.acquire(job.pk)
    r.delete(leases.lease_key(job.pk))  # the old holder stalled past its lease
    new = leases.acquire(job.pk)

    assert new is not None and not old.renew()
    with pytest.raises(state.TransitionError, match="fence"):
        state.transition(job, "succeeded", reason="late", fence=old.fence)
    assert state.transition(job, "queued", reason="taken over", fence=new.fence).status == "queued"


def test_a_lease_lost_with_redis_is_taken_again_by_its_holder(lease_redis, r, make_job):
    job = make_job("running")
    lease = leases.acquire(job.pk)
    r.flushdb()  # what a Redis restart without persistence does
    assert lease.renew()
    assert leases.holder(job.pk) == lease.owner


def test_release_leaves_a_lease_that_is_not_ours(lease_redis, r, make_job):
    job = make_job("running")
    old = leases.acquire(job.pk)
    r.delete(leases.lease_key(job.pk))
    new = leases.acquire(job.pk)
    old.release()
    assert leases.holder(job.pk) == new.owner


def test_a_lease_kept_while_its_holder_blocks_outlives_its_lifetime(
    lease_redis, make_job, settings
):
    settings.SYNCLANE_LEASE_TTL_S = 0.4
    settings.SYNCLANE_HEARTBEAT_S = 0.05
    job = make_job("running")
    lease = leases.acquire(job.pk)
    with leases.kept(lease):
        time.sleep(1.2)  # three lifetimes, as a slow stop of a run may take
        assert leases.holder(job.pk) == lease.owner
    time.sleep(0.8)
    assert leases.holder(job.pk) is None  # not renewed any more: it lapses
