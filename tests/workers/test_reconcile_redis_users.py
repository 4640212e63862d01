"""Reconcile deletes the Redis users of runs nobody supervises (their supervisor died).

Against a real redis-server of this test: the users are real ACL users, the credential a
run was given is tried for real after the sweep.
"""

from __future__ import annotations

import time

import pytest
import redis

from controlplane.jobs.models import Job
from workers.runtime import protocol
from workers.supervisor import lease as leases
from workers.supervisor import reconcile, redis_acl

from .conftest import ago

pytestmark = pytest.mark.django_db(transaction=True)


def works(credential: redis_acl.JobCredential) -> bool:
    """True if a run holding ``credential`` can still write its telemetry stream."""
    client = redis.Redis.from_url(credential.url)
    try:
        client.xadd(protocol.telemetry_stream(credential.job_id), {"type": "metrics"})
        return True
    except redis.AuthenticationError:
        return False
    finally:
        client.close()


def test_the_user_a_dead_supervisor_left_is_deleted_once_its_lease_lapsed(
    lease_redis, make_job, settings, r
):
    settings.SYNCLANE_LEASE_TTL_S = 0.5
    job = make_job("running", started_at=ago(120), heartbeat_at=ago(120))
    assert leases.acquire(job.pk) is not None  # the supervisor took the lease ...
    credential = redis_acl.create_job_user(r, job.pk, lease_redis)  # ... and made the user,
    time.sleep(1.0)  # ... then died (kill -9): nothing renewed, released or deleted

    assert reconcile.reconcile_step() == 2  # the run requeued, and its user deleted
    assert Job.objects.get(pk=job.pk).status == "queued"
    assert not works(credential)
    assert redis_acl.job_ids_with_users(r) == []


def test_the_users_of_supervised_runs_and_users_not_ours_are_kept(lease_redis, make_job, r):
    supervised = make_job("running", started_at=ago(5), heartbeat_at=ago(0))
    assert leases.acquire(supervised.pk) is not None
    kept = redis_acl.create_job_user(r, supervised.pk, lease_redis)
    leaked = redis_acl.create_job_user(r, 999_999, lease_redis)  # its job is long gone
    r.acl_setuser("operator", enabled=True, passwords=["+secret-operator-pw"], commands=["+ping"])

    assert reconcile.redis_users_of_unsupervised_runs() == 1
    assert works(kept) and not works(leaked)
    assert redis_acl.job_ids_with_users(r) == [supervised.pk]
    assert "operator" in r.acl_users()
    assert reconcile.redis_users_of_unsupervised_runs() == 0


def test_a_user_put_back_by_its_supervisor_after_a_sweep_works_with_the_same_password(
    lease_redis, make_job, r
):
    # The race the sweep allows: it looks (no lease), a launch takes the lease and makes its
    # user, the sweep deletes it. The supervisor's first heartbeat restores it.
    job = make_job("running", started_at=ago(5), heartbeat_at=ago(0))
    credential = redis_acl.create_job_user(r, job.pk, lease_redis)
    redis_acl.delete_job_user(r, job.pk)
    assert credential.restore(r) is True
    assert works(credential)
