"""DRF authentication by ``Authorization: Token <key>`` against our hashed, expiring tokens."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from controlplane.accounts.models import ApiToken, hash_key
from controlplane.accounts.services import token_touch


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's header parsing; the key is looked up by hash, and expiry and revocation apply."""

    model = ApiToken

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        try:
            token = ApiToken.objects.select_related("user").get(key_hash=hash_key(key))
        except ApiToken.DoesNotExist:
            raise AuthenticationFailed("Invalid token.") from None
        now = timezone.now()
        refusal = token.refusal(now)
        if refusal:
            raise AuthenticationFailed(refusal)
        token_touch(token, now)
        return token.user, token
