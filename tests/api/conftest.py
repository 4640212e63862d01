"""Fixtures of the API tests: a DRF client logged in as one of the personas."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.jobs.models import Job, Queue
from controlplane.tenancy.models import Tenant


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def as_user(api):
    """``as_user(user)``: the client, authenticated as ``user``."""

    def login(user) -> APIClient:
        api.force_authenticate(user)
        return api

    return login


def make_job(tenant: Tenant, name: str = "tiny", **fields) -> Job:
    """A job row as a submit leaves it (status and run fields overridable)."""
    defaults = {"workload": "tiny_gpt", "world_size": 2, "steps": 20, "sync": "full"}
    return Job.objects.create(
        tenant=tenant, queue=Queue.objects.get(tenant=tenant), name=name, **{**defaults, **fields}
    )
