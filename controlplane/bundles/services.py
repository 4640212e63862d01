"""Writes about bundles: upload, delete, mark used, expire; and the worker's fetch token.

Storage and database stay in step: an archive is stored only after it passed every
check, and a failed row write removes an archive it had just stored.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from controlplane.bundles import archive
from controlplane.bundles.models import CodeBundle
from controlplane.bundles.storage import get_storage
from controlplane.jobs import artifacts
from controlplane.jobs.choices import TERMINAL, JobStatus
from controlplane.lib.conflict import Conflict
from controlplane.tenancy.access import AnyUser, recorded_actor
from controlplane.tenancy.models import Tenant

log = logging.getLogger(__name__)

FETCH_TOKEN_SALT = "synclane.bundles.fetch"


class BundleError(ValueError):
    """The upload is refused; ``field`` and the message go into the 400."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class BundleInUse(Conflict):
    """The bundle is named by a job that has not finished."""


def limits() -> archive.Limits:
    return archive.Limits(
        max_files=settings.SYNCLANE_BUNDLE_MAX_FILES,
        max_bytes=settings.SYNCLANE_BUNDLE_MAX_BYTES,
        max_ratio=settings.SYNCLANE_BUNDLE_MAX_RATIO,
    )


def bundle_upload(
    *, tenant: Tenant, filename: str, chunks: Iterable[bytes], actor: AnyUser | None
) -> tuple[CodeBundle, bool]:
    """Check and store an uploaded archive; return (bundle, created).

    The same bytes uploaded again by the tenant return the existing bundle (created
    False). Raises BundleError (nothing stored, nothing written) for a refused archive
    or one that would take the tenant over its storage quota.
    Steps: 1. stream to a staging file, bounded; 2. validate; 3. check the quota;
    4. store; 5. one row.
    """
    storage = get_storage()
    with storage.staging_file() as staging:
        _receive(staging, chunks)
        try:
            manifest = archive.inspect(Path(staging.name), filename=filename, limits=limits())
        except archive.ArchiveError as exc:
            raise BundleError("file", str(exc)) from None
        existing = CodeBundle.objects.filter(tenant=tenant, sha256=manifest.sha256).first()
        if existing is not None and storage.exists(tenant.pk, manifest.sha256):
            bundle_mark_used(bundle=existing)
            return existing, False
        check_room(tenant, manifest.size)
        stored = storage.put(tenant.pk, manifest.sha256, Path(staging.name))
    try:
        return _create_row(tenant, filename, manifest, actor), True
    except Exception:
        if stored:
            storage.delete(tenant.pk, manifest.sha256)
        raise


def tenant_storage_bytes(tenant: Tenant) -> int:
    """Bytes the storage quota counts: every file under the tenant's job folders plus the
    archives of its stored bundles.

    A job that has ended counts the size its folder had then (``Job.artifact_bytes``); only
    the folders of jobs that have not ended (or ended before that was recorded) are walked,
    so a submit's check does not grow with the tenant's history. A job never admitted has no
    folder and is skipped.
    """
    jobs = tenant.jobs.all()
    ended = jobs.aggregate(total=Sum("artifact_bytes"))["total"] or 0
    live = jobs.filter(artifact_bytes__isnull=True).exclude(
        status=JobStatus.QUEUED, admitted_at__isnull=True
    )
    # Ids, not model instances: instances from a related manager each re-read the deferred
    # tenant_id (one query per live job) to link back to ``tenant``.
    walked = sum(
        artifacts.folder_bytes(artifacts.run_dir_of(pk)) for pk in live.values_list("pk", flat=True)
    )
    bundles = CodeBundle.objects.filter(tenant=tenant).aggregate(total=Sum("size"))["total"]
    return ended + walked + (bundles or 0)


def check_room(tenant: Tenant, size: int) -> None:
    """Raise BundleError (field ``file``) if storing ``size`` more bytes would take the
    tenant over SYNCLANE_TENANT_STORAGE_MB."""
    limit = artifacts.storage_limit_bytes()
    if limit is None:
        return
    used = tenant_storage_bytes(tenant)
    if used + size > limit:
        mb = 1024 * 1024
        raise BundleError(
            "file",
            f"storage quota exceeded: this archive ({size / mb:.1f} MB) would take "
            f"{tenant.slug}'s artifacts and bundles from {used / mb:.1f} MB over "
            f"{limit / mb:.0f} MB (SYNCLANE_TENANT_STORAGE_MB); delete unused bundles or "
            "finished jobs' artifacts first",
        )


def _receive(staging, chunks: Iterable[bytes]) -> None:  # type: ignore[no-untyped-def]
    """Copy the upload into ``staging``; refuse more bytes than any valid bundle has."""
    # An archive is never much larger than what it holds; headers aside.
    cap = settings.SYNCLANE_BUNDLE_MAX_BYTES + 16 * 1024 * 1024
    received = 0
    for chunk in chunks:
        received += len(chunk)
        if received > cap:
            raise BundleError("file", f"the archive is larger than {cap} bytes")
        staging.write(chunk)
    staging.flush()
    if received == 0:
        raise BundleError("file", "is empty")


def _create_row(
    tenant: Tenant, filename: str, manifest: archive.Manifest, actor: AnyUser | None
) -> CodeBundle:
    try:
        with transaction.atomic():
            bundle, _ = CodeBundle.objects.update_or_create(
                tenant=tenant,
                sha256=manifest.sha256,
                defaults={"last_used_at": timezone.now()},
                create_defaults={
                    "kind": manifest.kind,
                    "filename": Path(filename).name[:255],
                    "size": manifest.size,
                    "file_count": manifest.file_count,
                    "total_bytes": manifest.total_bytes,
                    "python_files": list(manifest.python_files),
                    "created_by": recorded_actor(actor),
                    "last_used_at": timezone.now(),
                },
            )
    except IntegrityError:  # the same upload raced us: theirs is ours
        bundle = CodeBundle.objects.get(tenant=tenant, sha256=manifest.sha256)
    return bundle


def bundle_mark_used(*, bundle: CodeBundle) -> None:
    """Record that a job was submitted with, or a worker fetched, this bundle."""
    CodeBundle.objects.filter(pk=bundle.pk).update(last_used_at=timezone.now())


def _in_use(bundle: CodeBundle) -> bool:
    return bundle.jobs.exclude(status__in=TERMINAL).exists()


def bundle_delete(*, bundle: CodeBundle) -> None:
    """Delete the bundle's row and archive. Raises BundleInUse if an unfinished job names it."""
    with transaction.atomic():
        if _in_use(bundle):
            raise BundleInUse(f"bundle {bundle.short_hash} is used by a job that has not finished")
        tenant_id, sha256 = bundle.tenant_id, bundle.sha256
        bundle.delete()
        transaction.on_commit(lambda: get_storage().delete(tenant_id, sha256))


def bundles_expire(*, now: dt.datetime | None = None) -> int:
    """Delete bundles unused for SYNCLANE_BUNDLE_TTL_S; return how many were deleted.

    A bundle named by an unfinished job is kept whatever its age.
    """
    cutoff = (now or timezone.now()) - dt.timedelta(seconds=settings.SYNCLANE_BUNDLE_TTL_S)
    deleted = 0
    for bundle in CodeBundle.objects.filter(last_used_at__lt=cutoff):
        try:
            bundle_delete(bundle=bundle)
            deleted += 1
        except BundleInUse:
            continue
    return deleted


# --- the worker's credential ---------------------------------------------------------------


def fetch_token(*, job_id: int) -> str:
    """A credential that lets a worker download the bundle of job ``job_id`` only.

    Signed with SECRET_KEY, expires after SYNCLANE_BUNDLE_TOKEN_TTL_S. Worth nothing for
    another job's bundle: the endpoint compares the bundle asked for with the job's.
    """
    return signing.dumps({"job": job_id}, salt=FETCH_TOKEN_SALT, compress=True)


def job_id_from_token(token: str) -> int | None:
    """The job id a valid, unexpired fetch token was made for; None otherwise."""
    try:
        data = signing.loads(
            token, salt=FETCH_TOKEN_SALT, max_age=settings.SYNCLANE_BUNDLE_TOKEN_TTL_S
        )
    except signing.BadSignature:
        return None
    job = data.get("job") if isinstance(data, dict) else None
    return job if isinstance(job, int) else None
