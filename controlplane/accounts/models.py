"""API tokens: named, expiring, revocable, and stored only as a hash.

DRF's authtoken keeps one clear-text, never-expiring key per user; a leaked database
dump or a forgotten laptop would then hold a working credential forever.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from django.conf import settings
from django.db import models


def hash_key(key: str) -> str:
    """The stored form of a token key (keys are 256-bit random: a plain SHA-256 suffices)."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    # The key's first characters, shown in listings so a user can tell tokens apart.
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    def refusal(self, now: dt.datetime) -> str:
        """Why this token cannot authenticate at ``now``, or "" if it can."""
        if self.revoked_at is not None:
            return "Token revoked."
        if self.expires_at <= now:
            return "Token expired."
        if not self.user.is_active:
            return "User inactive or deleted."
        return ""
