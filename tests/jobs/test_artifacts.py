"""A job's artifacts through the API and the job page: listed with sizes, downloaded, deleted,
tenant-scoped, never outside the job's folder; the tenant storage quota blocks new submits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec


@pytest.fixture
def jobs_dir(settings, tmp_path: Path) -> Path:
    settings.SYNCLANE_JOBS_DIR = tmp_path / "jobs"
    return settings.SYNCLANE_JOBS_DIR


@pytest.fixture
def job(vision, alice, jobs_dir: Path) -> Job:
    """Alice's finished job with a checkpoint, a rank log, a nested output and a secret link."""
    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="a", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    job.refresh_from_db()
    run = job.run_dir
    (run / "logs" / "r_1" / "attempt_0" / "0").mkdir(parents=True)
    (run / "ckpt-00000005.pt").write_bytes(b"\0" * 1000)
    (run / "logs" / "r_1" / "attempt_0" / "0" / "stdout.log").write_text("step 1\n")
    (run / "out").mkdir()
    (run / "out" / "preds.csv").write_text("a,b\n1,2\n")
    secret = jobs_dir / "secret.txt"
    secret.write_text("another job's file")
    os.symlink(secret, run / "out" / "link.txt")
    os.symlink(jobs_dir, run / "escape")
    return job


def as_user(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_the_api_lists_every_file_with_its_size_and_no_link(job, alice):
    body = as_user(alice).get(f"/api/v1/jobs/{job.pk}/artifacts/").json()
    assert [(f["path"], f["size"]) for f in body["files"]] == [
        ("ckpt-00000005.pt", 1000),
        ("logs/r_1/attempt_0/0/stdout.log", 7),
        ("out/preds.csv", 8),
    ]
    assert (body["file_count"], body["total_bytes"], body["truncated"]) == (3, 1015, False)


def test_a_file_downloads_with_its_content(job, alice):
    response = as_user(alice).get(f"/api/v1/jobs/{job.pk}/artifacts/out/preds.csv")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"a,b\n1,2\n"
    assert response["Content-Disposition"] == 'attachment; filename="preds.csv"'


@pytest.mark.parametrize("path", ["out/link.txt", "escape/secret.txt", "out", "missing.pt"])
def test_links_folders_and_missing_files_are_404(job, alice, path):
    assert as_user(alice).get(f"/api/v1/jobs/{job.pk}/artifacts/{path}").status_code == 404


@pytest.mark.parametrize("path", ["..%2Fsecret.txt", "out/..%2F..%2Fsecret.txt", "%2Fetc%2Fpasswd"])
def test_a_path_that_leaves_the_folder_is_a_400_naming_path(job, alice, path):
    response = as_user(alice).get(f"/api/v1/jobs/{job.pk}/artifacts/{path}")
    assert response.status_code == 400
    assert "path" in response.json()


def test_bob_cannot_list_or_download_alices_artifacts(job, bob):
    api = as_user(bob)
    assert api.get(f"/api/v1/jobs/{job.pk}/artifacts/").status_code == 404
    assert api.get(f"/api/v1/jobs/{job.pk}/artifacts/out/preds.csv").status_code == 404
    assert api.delete(f"/api/v1/jobs/{job.pk}/artifacts/").status_code == 404
    assert job.run_dir.is_dir()


def test_the_job_page_lists_files_with_download_links_for_alice_only(job, alice, bob):
    page = Client()
    page.force_login(alice)
    html = page.get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/jobs/{job.pk}/artifacts/out/preds.csv"' in html and 'data-bytes="1000"' in html
    assert "link.txt" not in html
    download = page.get(f"/jobs/{job.pk}/artifacts/ckpt-00000005.pt")
    assert download.status_code == 200 and len(b"".join(download.streaming_content)) == 1000
    assert page.get(f"/jobs/{job.pk}/artifacts/..%2Fsecret.txt").status_code == 400
    page.force_login(bob)
    assert page.get(f"/jobs/{job.pk}/artifacts/ckpt-00000005.pt").status_code == 404


def test_deleting_a_finished_jobs_artifacts_frees_its_folder(job, alice):
    assert as_user(alice).delete(f"/api/v1/jobs/{job.pk}/artifacts/").status_code == 204
    assert not job.run_dir.exists()
    assert (job.run_dir.parent / "secret.txt").exists()  # links were removed, not followed
    assert job.events.filter(reason__startswith="artifacts deleted").exists()


def test_a_running_jobs_artifacts_are_not_deleted(job, alice):
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    response = as_user(alice).delete(f"/api/v1/jobs/{job.pk}/artifacts/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"job {job.pk} is running; its artifacts can go once it ends"
    }
    assert (job.run_dir / "ckpt-00000005.pt").exists()


def test_over_the_storage_quota_a_submit_is_a_400_naming_it_and_writes_nothing(
    job, alice, settings, spec_input
):
    settings.SYNCLANE_TENANT_STORAGE_MB = 1
    (job.run_dir / "big.bin").write_bytes(b"\0" * (1024 * 1024))
    before = Job.objects.count()
    response = as_user(alice).post(
        "/api/v1/jobs/", {"tenant": "vision", **spec_input}, format="json"
    )
    assert response.status_code == 400
    assert "storage quota exceeded" in response.json()["tenant"][0]
    assert "SYNCLANE_TENANT_STORAGE_MB" in response.json()["tenant"][0]
    assert Job.objects.count() == before
    # Deleting the finished job's artifacts makes room again.
    as_user(alice).delete(f"/api/v1/jobs/{job.pk}/artifacts/")
    assert (
        as_user(alice)
        .post("/api/v1/jobs/", {"tenant": "vision", **spec_input}, format="json")
        .status_code
        == 201
    )


def ended_through_the_state_door(job: Job, status: str = JobStatus.SUCCEEDED) -> Job:
    """Take ``job`` from queued to ``status`` the way a run does (the folder is written first)."""
    from controlplane.jobs import state

    for to in (JobStatus.ADMITTED, JobStatus.RUNNING, status):
        job = state.transition(job, to, reason="test")
    return job


def test_a_job_records_its_folders_size_when_it_ends_and_the_quota_counts_that(
    vision, alice, jobs_dir
):
    from controlplane.bundles.services import tenant_storage_bytes

    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="a", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "ckpt.pt").write_bytes(b"\0" * 3000)
    job = ended_through_the_state_door(job)
    assert job.artifact_bytes == 3000
    # The ended job is counted from its row: its folder is not walked on every submit.
    (job.run_dir / "ckpt.pt").unlink()
    assert tenant_storage_bytes(vision) == 3000


def test_the_quota_walks_the_folders_of_jobs_that_have_not_ended(vision, alice, jobs_dir):
    from controlplane.bundles.services import tenant_storage_bytes
    from controlplane.jobs import state

    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="a", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    job = state.transition(job, JobStatus.ADMITTED, reason="test")
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "ckpt.pt").write_bytes(b"\0" * 700)
    assert tenant_storage_bytes(vision) == 700
    (job.run_dir / "more.pt").write_bytes(b"\0" * 300)
    assert tenant_storage_bytes(vision) == 1000


def test_deleting_artifacts_takes_the_recorded_size_off_the_quota(vision, alice, jobs_dir):
    from controlplane.bundles.services import tenant_storage_bytes

    job = job_submit(
        tenant=vision,
        spec=JobSpec(name="a", workload="tiny_gpt", world_size=1, steps=5),
        actor=alice,
    )
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "ckpt.pt").write_bytes(b"\0" * 5000)
    job = ended_through_the_state_door(job, JobStatus.FAILED)
    assert tenant_storage_bytes(vision) == 5000
    assert as_user(alice).delete(f"/api/v1/jobs/{job.pk}/artifacts/").status_code == 204
    job.refresh_from_db()
    assert (job.artifact_bytes, tenant_storage_bytes(vision)) == (0, 0)
