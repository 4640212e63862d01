"""Jobs in each state for the supervision tests, and leases in a Redis of this test alone."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from controlplane.jobs.models import Job


@pytest.fixture
def lease_redis(settings, redis_url: str) -> str:
    """Point the leases at this pytest process's own (emptied) Redis."""
    settings.REDIS_URL = redis_url
    return redis_url


@pytest.fixture
def make_job(vision, settings, tmp_path):
    """Create a job of vision in ``status`` with the given fields (job folders in tmp)."""
    settings.SYNCLANE_JOBS_DIR = tmp_path / "jobs"

    def make(status: str, **fields) -> Job:
        defaults = dict(
            tenant=vision,
            queue=vision.queues.get(name="default"),
            name=f"{status}-job",
            workload="tiny_gpt",
            world_size=2,
            steps=100,
            sync="full",
            status=status,
        )
        return Job.objects.create(**{**defaults, **fields})

    return make


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)
