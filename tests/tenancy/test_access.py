from __future__ import annotations

import pytest
from django.http import Http404

from controlplane.jobs.access import get_job_for, jobs_for
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from controlplane.tenancy.access import acting_tenants_for, get_tenant_for, tenants_for


@pytest.fixture
def vision_job(vision, alice):
    return job_submit(
        tenant=vision,
        spec=JobSpec(name="v", workload="tiny_gpt", world_size=1, steps=1),
        actor=alice,
    )


def test_a_member_sees_only_their_tenants(alice, bob, speech):
    assert list(tenants_for(alice).values_list("slug", flat=True)) == ["vision"]
    assert list(tenants_for(bob).values_list("slug", flat=True)) == ["speech"]


def test_a_site_admin_sees_every_tenant(django_user_model, vision, speech):
    admin = django_user_model.objects.create_superuser("root", password="x" * 12)
    assert set(tenants_for(admin).values_list("slug", flat=True)) == {"vision", "speech"}


def test_a_viewer_belongs_but_may_not_act(charlie):
    assert tenants_for(charlie).count() == 1
    assert acting_tenants_for(charlie).count() == 0


def test_another_tenant_is_reported_missing(bob, vision):
    with pytest.raises(Http404):
        get_tenant_for(bob, "vision")


def test_another_tenants_job_is_reported_missing(bob, vision_job):
    assert not jobs_for(bob).exists()
    with pytest.raises(Http404):
        get_job_for(bob, vision_job.pk)


def test_a_member_gets_their_tenants_job(alice, charlie, vision_job):
    assert get_job_for(alice, vision_job.pk) == vision_job
    assert get_job_for(charlie, vision_job.pk) == vision_job
