"""Writes about API tokens: issue and revoke."""

from __future__ import annotations

import datetime as dt
import secrets

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from controlplane.accounts.models import ApiToken, hash_key
from controlplane.tenancy.access import AnyUser

# What a client shows before the random part, so a leaked key is easy to grep for.
KEY_PREFIX = "sl_"
# Longest lifetime a token may be given, whatever it asks for.
MAX_TTL_DAYS = 365


def token_issue(*, user: User, name: str, ttl_days: int | None = None) -> tuple[ApiToken, str]:
    """Create a token for ``user``; return it and its key (the only time the key is known)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    days = settings.SYNCLANE_TOKEN_TTL_DAYS if ttl_days is None else ttl_days
    token = ApiToken.objects.create(
        user=user,
        name=name,
        key_hash=hash_key(key),
        prefix=key[: len(KEY_PREFIX) + 6],
        expires_at=timezone.now() + dt.timedelta(days=days),
    )
    return token, key


def token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke ``token`` from now on (idempotent: a revoked token keeps its first revocation)."""
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db()
    return token


def tokens_of(user: AnyUser) -> QuerySet[ApiToken]:
    """The user's own tokens, newest first; nobody sees another user's tokens (none: anonymous)."""
    if not isinstance(user, User):
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user=user)


def token_touch(token: ApiToken, now: dt.datetime) -> None:
    """Record that the token was used, at most once a minute (not one write per request)."""
    if token.last_used_at is None or now - token.last_used_at > dt.timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
