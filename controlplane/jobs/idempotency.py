"""Safe retries of job submission: the ``Idempotency-Key`` request header.

    POST /api/v1/jobs/  Idempotency-Key: 5f2c…   -> 201, job 7
    (same key, same body, again)                 -> 201, the same body; Idempotent-Replayed: true
    (same key, another body)                     -> 422, nothing written

A client that lost the answer to a submit (timeout, a restart, a dropped connection)
can send it again with the same key and gets the first answer instead of a second job.
Keys are per user and remembered for ``SYNCLANE_IDEMPOTENCY_WINDOW_S``; only a submit
that created a job is remembered (a refused one writes nothing, so it may be corrected
and sent again with the same key). Follows the IETF httpapi draft
"The Idempotency-Key HTTP Header Field" (422 for a key reused with another payload).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.jobs.models import IdempotencyKey, Job

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255


class IdempotencyError(ValueError):
    """Base of the key's errors; ``status`` is the HTTP status to answer with."""

    status = 400


class MalformedKey(IdempotencyError):
    """The header is empty, too long or not printable ASCII."""


class KeyReused(IdempotencyError):
    """The key was used (by this user, within the window) with another request body."""

    status = 422


@dataclass(frozen=True)
class Answer:
    """What a submit answered: replayed as is for a retry."""

    status_code: int
    body: dict[str, Any]
    replayed: bool


def parse_key(raw: str | None) -> str | None:
    """Return the header's key, None when absent; raise MalformedKey when unusable."""
    if raw is None:
        return None
    if not raw or len(raw) > MAX_KEY_LENGTH or not raw.isascii() or not raw.isprintable():
        raise MalformedKey(f"must be 1 to {MAX_KEY_LENGTH} printable ASCII characters")
    return raw


def fingerprint(data: Any) -> str:
    """SHA-256 of ``data`` as canonical JSON (key order and spacing do not matter)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def submit_once(
    *,
    user: User,
    key: str,
    data: Any,
    submit: Callable[[], tuple[Job, int, dict[str, Any]]],
) -> Answer:
    """Answer a keyed submit: the remembered answer, or ``submit()``'s, remembered.

    ``submit`` creates the job and returns (job, status, body); it may raise (a refused
    submit), and then nothing is remembered. Raises KeyReused when the key came with
    another body. Two racing requests with one key create one job: the loser's
    transaction is rolled back and it answers with the winner's answer.
    """
    print_ = fingerprint(data)
    remembered = _remembered(user, key, print_)
    if remembered is not None:
        return remembered
    try:
        with transaction.atomic():
            job, status_code, body = submit()
            IdempotencyKey.objects.create(
                user=user,
                key=key,
                fingerprint=print_,
                job=job,
                status_code=status_code,
                response=body,
            )
    except IntegrityError:
        remembered = _remembered(user, key, print_)
        if remembered is None:
            raise
        return remembered
    return Answer(status_code, body, replayed=False)


def _remembered(user: User, key: str, print_: str) -> Answer | None:
    """The answer remembered for ``key``, or None; raises KeyReused for another body.

    The user's expired keys are forgotten first, so the table holds one window of keys.
    """
    IdempotencyKey.objects.filter(user=user, created_at__lt=timezone.now() - window()).delete()
    row = IdempotencyKey.objects.filter(user=user, key=key).first()
    if row is None:
        return None
    if row.fingerprint != print_:
        raise KeyReused(
            f"was already used for another request body (job {row.job_id}); "
            "send a new key for a new job"
        )
    return Answer(row.status_code, dict(row.response), replayed=True)


def window() -> dt.timedelta:
    return dt.timedelta(seconds=settings.SYNCLANE_IDEMPOTENCY_WINDOW_S)
