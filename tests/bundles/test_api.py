"""The bundles API: upload, dedupe, list, download, delete; refusals store nothing."""

from __future__ import annotations

import datetime as dt
import io
import stat
import tarfile

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.bundles.models import CodeBundle
from controlplane.bundles.services import bundles_expire
from controlplane.jobs.models import Job
from tests.bundles.archives import (
    TRAIN,
    make_tar_gz,
    make_zip,
    tar_entry,
    tar_gz_with,
    zip_with_mode,
)
from tests.bundles.conftest import stored_files


@pytest.fixture
def api() -> APIClient:
    return APIClient()


def as_user(api: APIClient, user) -> APIClient:
    api.force_authenticate(user)
    return api


def upload(api: APIClient, path, *, tenant="vision", name=None):
    with open(path, "rb") as f:
        data = io.BytesIO(f.read())
    data.name = name or path.name
    return api.post("/api/v1/bundles/", {"tenant": tenant, "file": data}, format="multipart")


@pytest.fixture
def alice_bundle(api, alice, tmp_path) -> dict:
    response = upload(as_user(api, alice), make_zip(tmp_path / "code.zip", TRAIN))
    assert response.status_code == 201, response.json()
    return response.json()


def test_an_upload_creates_a_bundle_described_by_its_content(api, alice, tmp_path, storage_dir):
    path = make_tar_gz(tmp_path / "code.tar.gz", TRAIN)
    response = upload(as_user(api, alice), path)
    assert response.status_code == 201
    body = response.json()
    assert (body["tenant"], body["kind"], body["file_count"], body["created_by"]) == (
        "vision",
        "tar.gz",
        2,
        "alice",
    )
    assert body["python_files"] == ["pkg/__init__.py", "train.py"]
    assert stored_files(storage_dir) == [
        f"bundles/{CodeBundle.objects.get().tenant_id}/{body['sha256']}"
    ]


def test_the_same_bytes_uploaded_twice_are_one_bundle(api, alice, tmp_path, alice_bundle):
    again = upload(api, make_zip(tmp_path / "code.zip", TRAIN), name="renamed.zip")
    assert again.status_code == 200
    assert again.json()["id"] == alice_bundle["id"]
    assert CodeBundle.objects.count() == 1


def test_two_tenants_with_the_same_bytes_get_a_bundle_each(api, alice, bob, tmp_path, alice_bundle):
    response = upload(as_user(api, bob), make_zip(tmp_path / "code.zip", TRAIN), tenant="speech")
    assert response.status_code == 201
    assert response.json()["id"] != alice_bundle["id"]


@pytest.mark.parametrize(
    "build,name,reason",
    [
        (lambda p: make_zip(p, {"../evil.py": b"x"}), "c.zip", "escapes"),
        (lambda p: make_tar_gz(p, {"/abs.py": b"x"}), "c.tar.gz", "absolute"),
        (lambda p: tar_gz_with(p, tar_entry("l", tarfile.SYMTYPE, linkname="/")), "c.tgz", "link"),
        (lambda p: tar_gz_with(p, tar_entry("h", tarfile.LNKTYPE, linkname="x")), "c.tgz", "link"),
        (lambda p: zip_with_mode(p, "l", stat.S_IFLNK | 0o777), "c.zip", "link"),
        (lambda p: tar_gz_with(p, tar_entry("d", tarfile.CHRTYPE)), "c.tgz", "device"),
        (lambda p: tar_gz_with(p, tar_entry("f", tarfile.FIFOTYPE)), "c.tgz", "fifo"),
        (lambda p: make_zip(p, {f"{i}.py": b"" for i in range(6)}), "c.zip", "more than 5 files"),
        (lambda p: make_zip(p, {"a.bin": bytes(range(256)) * 5}), "c.zip", "more than 1000 bytes"),
        (lambda p: make_zip(p, {"z.bin": bytes(20 << 20)}), "c.zip", "compression bomb"),
        (lambda p: make_tar_gz(p, {"z.bin": bytes(20 << 20)}), "c.tar.gz", "compression bomb"),
        (lambda p: make_tar_gz(p, TRAIN), "c.zip", "is not a zip"),
        (lambda p: make_zip(p, TRAIN), "c.tar.gz", "is not a tar.gz"),
        (lambda p: make_zip(p, TRAIN), "c.rar", "not a .zip"),
    ],
)
def test_a_hostile_archive_is_a_400_naming_the_problem_and_nothing_is_stored(
    api, alice, tmp_path, settings, storage_dir, build, name, reason
):
    settings.SYNCLANE_BUNDLE_MAX_FILES = 5
    settings.SYNCLANE_BUNDLE_MAX_BYTES = 1000 if "bytes" in reason else 200 << 20
    response = upload(as_user(api, alice), build(tmp_path / "upload"), name=name)
    assert response.status_code == 400
    assert reason in " ".join(response.json()["file"])
    assert CodeBundle.objects.count() == 0
    assert stored_files(storage_dir) == []


def test_an_upload_without_file_or_tenant_names_both_fields(api, alice):
    response = as_user(api, alice).post("/api/v1/bundles/", {}, format="multipart")
    assert response.status_code == 400
    assert {"tenant", "file"} <= set(response.json())


def test_bob_cannot_upload_into_alices_tenant(api, bob, vision, tmp_path, storage_dir):
    response = upload(as_user(api, bob), make_zip(tmp_path / "c.zip", TRAIN), tenant="vision")
    assert response.status_code == 400
    assert "tenant" in response.json()
    assert stored_files(storage_dir) == []


def test_bob_cannot_list_see_download_or_delete_alices_bundle(api, bob, alice_bundle):
    as_user(api, bob)
    assert api.get("/api/v1/bundles/").json() == []
    bundle_id = alice_bundle["id"]
    assert api.get(f"/api/v1/bundles/{bundle_id}/").status_code == 404
    assert api.get(f"/api/v1/bundles/{bundle_id}/download/").status_code == 404
    assert api.delete(f"/api/v1/bundles/{bundle_id}/").status_code == 404
    assert CodeBundle.objects.filter(pk=bundle_id).exists()


def test_alice_downloads_her_bundle_byte_for_byte(api, alice, tmp_path, alice_bundle):
    response = api.get(f"/api/v1/bundles/{alice_bundle['id']}/download/")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (tmp_path / "code.zip").read_bytes()


def test_a_viewer_sees_but_cannot_delete(api, charlie, alice_bundle):
    as_user(api, charlie)
    assert api.get(f"/api/v1/bundles/{alice_bundle['id']}/").status_code == 200
    assert api.delete(f"/api/v1/bundles/{alice_bundle['id']}/").status_code == 404


def test_deleting_removes_row_and_archive(
    api, alice, alice_bundle, storage_dir, django_capture_on_commit_callbacks
):
    assert len(stored_files(storage_dir)) == 1
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"/api/v1/bundles/{alice_bundle['id']}/")
    assert response.status_code == 204
    assert CodeBundle.objects.count() == 0
    assert stored_files(storage_dir) == []


def submit_code(api, bundle_ref, entrypoint="train.py --epochs 2", **extra):
    data = {"tenant": "vision", "name": "mine", "world_size": 2, "steps": 5}
    data.update(code=bundle_ref, entrypoint=entrypoint, **extra)
    return api.post("/api/v1/jobs/", data, format="json")


def test_a_job_runs_a_bundle_named_by_hash_prefix_and_shows_the_code(api, alice, alice_bundle):
    response = submit_code(api, alice_bundle["sha256"][:12], env={"MY_FLAG": "1"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["workload"] == ""
    assert body["bundle_sha256"] == alice_bundle["sha256"]
    assert body["bundle_file_count"] == 2
    assert body["entrypoint"] == ["train.py", "--epochs", "2"]
    assert body["env"] == {"MY_FLAG": "1"}


def test_a_job_can_run_a_module_of_the_bundle(api, alice, alice_bundle):
    response = submit_code(api, alice_bundle["id"], entrypoint=["-m", "pkg"])
    assert response.status_code == 400  # pkg has no __main__.py
    assert "module 'pkg' is not in the bundle" in response.json()["entrypoint"][0]


def test_an_entrypoint_missing_from_the_bundle_is_a_400(api, alice, alice_bundle):
    response = submit_code(api, alice_bundle["id"], entrypoint="other.py")
    assert response.status_code == 400
    assert "'other.py' is not a file of the bundle" in response.json()["entrypoint"][0]
    assert Job.objects.count() == 0


def test_bob_cannot_run_alices_bundle(api, alice, bob, alice_bundle):
    as_user(api, bob)
    for ref in (alice_bundle["id"], alice_bundle["sha256"]):
        response = submit_code(api, ref, tenant="speech")
        assert response.status_code == 400
        assert "no bundle" in response.json()["code"][0]
    assert Job.objects.count() == 0


def test_an_unfinished_job_keeps_its_bundle_from_deletion_and_expiry(
    api, alice, alice_bundle, settings
):
    assert submit_code(api, alice_bundle["id"]).status_code == 201
    refused = api.delete(f"/api/v1/bundles/{alice_bundle['id']}/")
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": f"bundle {alice_bundle['sha256'][:12]} is used by a job that has not finished"
    }
    CodeBundle.objects.update(last_used_at=timezone.now() - dt.timedelta(days=400))
    assert bundles_expire() == 0
    Job.objects.update(status="succeeded")
    assert bundles_expire() == 1
    job = Job.objects.get()
    assert job.bundle is None and job.bundle_sha256 == alice_bundle["sha256"]


def test_expiry_keeps_recently_used_bundles(alice_bundle, settings):
    settings.SYNCLANE_BUNDLE_TTL_S = 3600
    assert bundles_expire() == 0
    assert bundles_expire(now=timezone.now() + dt.timedelta(hours=2)) == 1


def fetch(api, sha256, token):
    api.force_authenticate(None)
    return api.get(f"/api/v1/internal/bundles/{sha256}/", HTTP_AUTHORIZATION=f"Bundle {token}")


def test_a_workers_token_downloads_only_its_own_jobs_bundle_while_it_runs(
    api, alice, bob, tmp_path, alice_bundle, settings
):
    from controlplane.bundles.services import fetch_token

    assert submit_code(api, alice_bundle["id"]).status_code == 201
    alice_job = Job.objects.get()
    as_user(api, bob)
    bob_bundle = upload(api, make_zip(tmp_path / "b.zip", {"b.py": b"x"}), tenant="speech").json()
    response = submit_code(api, bob_bundle["id"], entrypoint="b.py", tenant="speech")
    bob_job = Job.objects.get(pk=response.json()["id"])
    Job.objects.update(status="running")

    assert fetch(api, alice_bundle["sha256"], fetch_token(job_id=alice_job.pk)).status_code == 200
    # Bob's job's credential is worth nothing for Alice's bundle; nor is a forged one.
    assert fetch(api, alice_bundle["sha256"], fetch_token(job_id=bob_job.pk)).status_code == 404
    assert fetch(api, alice_bundle["sha256"], "forged:token").status_code == 404
    assert api.get(f"/api/v1/internal/bundles/{alice_bundle['sha256']}/").status_code == 404
    # Expired, or the job no longer running: refused.
    settings.SYNCLANE_BUNDLE_TOKEN_TTL_S = -1
    assert fetch(api, alice_bundle["sha256"], fetch_token(job_id=alice_job.pk)).status_code == 404
    settings.SYNCLANE_BUNDLE_TOKEN_TTL_S = 3600
    Job.objects.update(status="succeeded")
    assert fetch(api, alice_bundle["sha256"], fetch_token(job_id=alice_job.pk)).status_code == 404
