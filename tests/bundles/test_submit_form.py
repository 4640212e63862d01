"""The submit form's code fields: upload a bundle with the job, or name one; refusals store nothing."""

from __future__ import annotations

import io

import pytest

from controlplane.bundles.models import CodeBundle
from controlplane.jobs.models import Job
from tests.bundles.archives import TRAIN, make_tar_gz, make_zip
from tests.bundles.conftest import stored_files

FIELDS = {"name": "mine", "world_size": "2", "steps": "5", "sync": "full", "priority": "normal"}


def archive_upload(path, name=None):
    data = io.BytesIO(path.read_bytes())
    data.name = name or path.name
    return data


@pytest.fixture
def as_alice(client, alice):
    client.force_login(alice)
    return client


def test_a_job_is_submitted_with_its_uploaded_bundle_and_shows_its_code(as_alice, tmp_path):
    upload = archive_upload(make_tar_gz(tmp_path / "code.tar.gz", TRAIN))
    response = as_alice.post(
        "/",
        {**FIELDS, "tenant": "vision", "code_file": upload, "entrypoint": "train.py --epochs 3"},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    job = Job.objects.get()
    bundle = CodeBundle.objects.get()
    assert (job.bundle, job.entrypoint, job.workload) == (bundle, ["train.py", "--epochs", "3"], "")
    page = as_alice.get(f"/jobs/{job.pk}/").content.decode()
    assert bundle.sha256[:12] in page and "train.py --epochs 3" in page
    assert bundle.sha256[:12] in as_alice.get("/").content.decode()


def test_a_hostile_upload_on_the_form_is_a_400_naming_it_and_stores_nothing(
    as_alice, tmp_path, storage_dir
):
    upload = archive_upload(make_zip(tmp_path / "c.zip", {"../evil.py": b"x"}))
    response = as_alice.post(
        "/", {**FIELDS, "tenant": "vision", "code_file": upload, "entrypoint": "evil.py"}
    )
    assert response.status_code == 400
    assert "escapes the bundle root" in response.content.decode()
    assert (Job.objects.count(), CodeBundle.objects.count(), stored_files(storage_dir)) == (
        0,
        0,
        [],
    )


def test_an_invalid_form_does_not_store_its_upload(as_alice, tmp_path, storage_dir):
    upload = archive_upload(make_zip(tmp_path / "c.zip", TRAIN))
    response = as_alice.post(
        "/",
        {
            **FIELDS,
            "world_size": "0",
            "tenant": "vision",
            "code_file": upload,
            "entrypoint": "train.py",
        },
    )
    assert response.status_code == 400
    assert (CodeBundle.objects.count(), stored_files(storage_dir)) == (0, [])


def test_bob_cannot_run_alices_bundle_from_the_form(client, alice, bob, tmp_path, as_alice):
    as_alice.post(
        "/",
        {
            **FIELDS,
            "tenant": "vision",
            "code_file": archive_upload(make_zip(tmp_path / "c.zip", TRAIN)),
            "entrypoint": "train.py",
        },
    )
    sha = CodeBundle.objects.get().sha256
    client.force_login(bob)
    response = client.post(
        "/", {**FIELDS, "tenant": "speech", "code": sha, "entrypoint": "train.py"}
    )
    assert response.status_code == 400
    assert "no bundle" in response.content.decode()
    assert Job.objects.filter(tenant__slug="speech").count() == 0
    assert sha[:12] not in client.get("/").content.decode()
