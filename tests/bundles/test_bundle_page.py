"""The bundles page lists the caller's tenants' bundles: hash, size, files, last use, jobs."""

from __future__ import annotations

import io

import pytest

from controlplane.bundles.models import CodeBundle
from controlplane.jobs.models import Job
from tests.bundles.archives import TRAIN, make_tar_gz
from tests.bundles.conftest import stored_files

FIELDS = {"name": "mine", "world_size": "2", "steps": "5", "sync": "full", "priority": "normal"}


@pytest.fixture
def alices_bundle_job(client, alice, tmp_path) -> Job:
    """A job Alice submitted from the form with an uploaded bundle."""
    data = io.BytesIO(make_tar_gz(tmp_path / "code.tar.gz", TRAIN).read_bytes())
    data.name = "code.tar.gz"
    client.force_login(alice)
    response = client.post(
        "/", {**FIELDS, "tenant": "vision", "code_file": data, "entrypoint": "train.py"}
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    client.logout()
    return Job.objects.get()


def test_alice_sees_her_bundle_with_its_hash_size_files_and_jobs(client, alice, alices_bundle_job):
    bundle = CodeBundle.objects.get()
    client.force_login(alice)
    page = client.get("/bundles/").content.decode()
    assert bundle.short_hash in page and bundle.sha256 in page
    assert "code.tar.gz" in page
    assert f"<td>{bundle.file_count}</td>" in page
    assert f'href="/jobs/{alices_bundle_job.pk}/"' in page
    assert f"{bundle.last_used_at:%Y-%m-%d}" in page


def test_the_submit_form_links_to_the_bundles_page(client, alice):
    client.force_login(alice)
    assert 'href="/bundles/"' in client.get("/").content.decode()


def test_bob_sees_none_of_alices_bundles(client, bob, alices_bundle_job):
    bundle = CodeBundle.objects.get()
    client.force_login(bob)
    response = client.get("/bundles/")
    assert response.status_code == 200
    page = response.content.decode()
    assert bundle.short_hash not in page and "code.tar.gz" not in page
    assert "No bundles in your tenants yet." in page


def test_the_bundles_page_needs_a_login(client):
    response = client.get("/bundles/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_alice_deletes_a_bundle_no_unfinished_job_uses_from_the_page(
    client, alice, alices_bundle_job, storage_dir, django_capture_on_commit_callbacks
):
    Job.objects.update(status="succeeded")
    bundle = CodeBundle.objects.get()
    client.force_login(alice)
    assert f'action="/bundles/{bundle.pk}/delete/"' in client.get("/bundles/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):  # the archive goes after commit
        response = client.post(f"/bundles/{bundle.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == "/bundles/"
    assert not CodeBundle.objects.exists()
    assert stored_files(storage_dir) == []
    job = Job.objects.get()  # the job keeps the record of what it ran
    assert job.bundle is None and job.bundle_sha256 == bundle.sha256


def test_a_bundle_an_unfinished_job_uses_is_kept_with_a_409_saying_why(
    client, alice, alices_bundle_job
):
    bundle = CodeBundle.objects.get()
    client.force_login(alice)
    response = client.post(f"/bundles/{bundle.pk}/delete/")
    assert response.status_code == 409
    page = response.content.decode()
    assert f"bundle {bundle.short_hash} is used by a job that has not finished" in page
    assert bundle.short_hash in page  # the page, with the bundle still listed
    assert CodeBundle.objects.filter(pk=bundle.pk).exists()


def test_bob_cannot_delete_alices_bundle_and_charlie_the_viewer_gets_no_button(
    client, bob, charlie, alices_bundle_job
):
    Job.objects.update(status="succeeded")
    bundle = CodeBundle.objects.get()
    for outsider in (bob, charlie):
        client.force_login(outsider)
        assert client.post(f"/bundles/{bundle.pk}/delete/").status_code == 404
    assert "/delete/" not in client.get("/bundles/").content.decode()  # charlie sees it only
    assert CodeBundle.objects.filter(pk=bundle.pk).exists()


def test_deleting_takes_a_post(client, alice, alices_bundle_job):
    Job.objects.update(status="succeeded")
    bundle = CodeBundle.objects.get()
    client.force_login(alice)
    assert client.get(f"/bundles/{bundle.pk}/delete/").status_code == 405
    assert CodeBundle.objects.filter(pk=bundle.pk).exists()
