"""The tenant storage quota counts stored bundles too; an upload over it stores nothing."""

from __future__ import annotations

import io
import random

import pytest
from rest_framework.test import APIClient

from controlplane.bundles.models import CodeBundle
from controlplane.bundles.services import tenant_storage_bytes
from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec
from tests.bundles.archives import make_tar_gz
from tests.bundles.conftest import stored_files
from tests.bundles.test_api import as_user, upload


def incompressible_bundle(path, *, size: int, seed: int):
    """A .tar.gz of about ``size`` bytes: random data does not compress."""
    noise = random.Random(seed).randbytes(size)
    return make_tar_gz(path, {"train.py": b"print('hi')\n", "weights.bin": noise})


@pytest.fixture
def quota_1mb(settings):
    settings.SYNCLANE_TENANT_STORAGE_MB = 1


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def visions_finished_job(settings, tmp_path, vision, alice) -> Job:
    """A finished job of Vision's with an empty run folder of its own."""
    settings.SYNCLANE_JOBS_DIR = tmp_path / "jobs"
    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="a", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    job.run_dir.mkdir(parents=True)
    return job


def test_a_tenants_storage_counts_its_bundles_archives(api, alice, vision, tmp_path):
    assert tenant_storage_bytes(vision) == 0
    path = incompressible_bundle(tmp_path / "a.tar.gz", size=200_000, seed=1)
    assert upload(as_user(api, alice), path).status_code == 201
    assert tenant_storage_bytes(vision) == path.stat().st_size


def test_an_upload_over_the_quota_is_a_400_naming_it_and_stores_nothing(
    api, alice, tmp_path, storage_dir, quota_1mb
):
    first = incompressible_bundle(tmp_path / "a.tar.gz", size=600_000, seed=1)
    assert upload(as_user(api, alice), first).status_code == 201
    kept = stored_files(storage_dir)

    second = incompressible_bundle(tmp_path / "b.tar.gz", size=600_000, seed=2)
    response = upload(as_user(api, alice), second)

    assert response.status_code == 400
    message = response.json()["file"][0]
    assert "storage quota exceeded" in message and "SYNCLANE_TENANT_STORAGE_MB" in message
    assert CodeBundle.objects.count() == 1
    assert stored_files(storage_dir) == kept


def test_an_upload_that_fits_beside_the_job_folders_is_stored(
    api, alice, tmp_path, quota_1mb, visions_finished_job
):
    (visions_finished_job.run_dir / "ckpt.pt").write_bytes(b"\0" * 300_000)
    path = incompressible_bundle(tmp_path / "a.tar.gz", size=600_000, seed=1)
    assert upload(as_user(api, alice), path).status_code == 201


def test_job_folders_and_bundles_together_can_refuse_an_upload(
    api, alice, tmp_path, quota_1mb, visions_finished_job
):
    (visions_finished_job.run_dir / "ckpt.pt").write_bytes(b"\0" * 600_000)
    path = incompressible_bundle(tmp_path / "a.tar.gz", size=600_000, seed=1)
    response = upload(as_user(api, alice), path)
    assert response.status_code == 400
    assert "SYNCLANE_TENANT_STORAGE_MB" in response.json()["file"][0]
    assert CodeBundle.objects.count() == 0


def test_a_submit_is_refused_once_bundles_fill_the_quota(
    api, alice, tmp_path, settings, spec_input
):
    path = incompressible_bundle(tmp_path / "a.tar.gz", size=1_100_000, seed=1)
    assert upload(as_user(api, alice), path).status_code == 201
    settings.SYNCLANE_TENANT_STORAGE_MB = 1  # now under what the bundle alone takes
    response = api.post("/api/v1/jobs/", {"tenant": "vision", **spec_input}, format="json")
    assert response.status_code == 400
    assert "code bundles" in response.json()["tenant"][0]


def test_uploading_a_bundle_again_at_a_full_quota_returns_the_stored_one(
    api, alice, tmp_path, settings
):
    path = incompressible_bundle(tmp_path / "a.tar.gz", size=1_100_000, seed=1)
    assert upload(as_user(api, alice), path).status_code == 201
    settings.SYNCLANE_TENANT_STORAGE_MB = 1
    assert upload(as_user(api, alice), path).status_code == 200  # it adds nothing


def test_another_tenants_bundles_do_not_count_against_yours(api, alice, bob, tmp_path, quota_1mb):
    alices = incompressible_bundle(tmp_path / "a.tar.gz", size=900_000, seed=1)
    assert upload(as_user(api, alice), alices).status_code == 201
    bobs = incompressible_bundle(tmp_path / "b.tar.gz", size=900_000, seed=2)
    assert upload(as_user(api, bob), bobs, tenant="speech").status_code == 201


def test_a_form_upload_over_the_quota_is_a_400_on_the_form_and_writes_nothing(
    client, alice, tmp_path, storage_dir, quota_1mb
):
    path = incompressible_bundle(tmp_path / "a.tar.gz", size=1_100_000, seed=1)
    data = io.BytesIO(path.read_bytes())
    data.name = "a.tar.gz"
    client.force_login(alice)
    fields = {"name": "big", "world_size": "1", "steps": "5", "sync": "full", "priority": "normal"}
    response = client.post(
        "/", {**fields, "tenant": "vision", "code_file": data, "entrypoint": "train.py"}
    )
    assert response.status_code == 400
    assert "SYNCLANE_TENANT_STORAGE_MB" in response.content.decode()
    assert (Job.objects.count(), CodeBundle.objects.count(), stored_files(storage_dir)) == (
        0,
        0,
        [],
    )


def test_counting_a_tenants_storage_takes_the_same_queries_however_many_jobs_run(
    settings, tmp_path, vision, alice, django_assert_num_queries
):
    # A submit counts the tenant's storage: the folders of its live jobs are walked, and
    # reading them must not cost a query per job (it once did: 16 running jobs made every
    # submit 16 queries slower).
    settings.SYNCLANE_JOBS_DIR = tmp_path / "jobs"
    spec = JobSpec(name="a", workload="tiny_gpt", world_size=1, steps=5)
    for count in (1, 6):
        while Job.objects.filter(tenant=vision, status=JobStatus.RUNNING).count() < count:
            job = job_submit(tenant=vision, spec=spec, actor=alice)
            Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
            job.run_dir.mkdir(parents=True)
            (job.run_dir / "rank0.log").write_bytes(b"x" * 100)
        with django_assert_num_queries(3):  # ended jobs' sizes, live job ids, bundles
            assert tenant_storage_bytes(vision) == 100 * count
