from __future__ import annotations

import pytest

from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec

from ..conftest import PASSWORD


@pytest.fixture
def visions_job(vision, alice):
    return job_submit(
        tenant=vision,
        spec=JobSpec(name="resnet", workload="tiny_gpt", world_size=2, steps=50),
        actor=alice,
    )


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD)


def client_for(client, user):
    client.force_login(user)
    return client
