"""REST API v1 for API tokens: log in for one, list yours, create more, revoke them.

POST /api/v1/auth/token/      username, password (+ name, expires_in_days) -> a new token
DELETE /api/v1/auth/token/    revoke the token this request authenticates with (log out)
GET, POST /api/v1/auth/tokens/            list your tokens; create one (name, expires_in_days)
DELETE /api/v1/auth/tokens/<id>/          revoke one of yours (another user's is a 404)

A key is shown once, when the token is created; only its hash is stored.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotAuthenticated, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.authentication import ExpiringTokenAuthentication
from controlplane.accounts.models import ApiToken
from controlplane.accounts.services import MAX_TTL_DAYS, token_issue, token_revoke, tokens_of
from controlplane.accounts.throttles import LoginIPThrottle, LoginUsernameThrottle
from controlplane.lib.api_schema import errors
from controlplane.lib.parsers import BoundedJSONParser, body_object
from controlplane.lib.strict import is_whole_number, unknown_fields


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class NewTokenSerializer(TokenSerializer):
    """A token just created: the only answer that carries its key."""

    token = serializers.CharField(help_text="the key; send it as `Authorization: Token <key>`")

    class Meta(TokenSerializer.Meta):
        fields = ["token", *TokenSerializer.Meta.fields]
        read_only_fields = fields


class NewTokenRequest(serializers.Serializer[Any]):
    """A new token's fields, for the schema (``new_token_fields`` validates them)."""

    name = serializers.CharField(max_length=100, default="api")
    expires_in_days = serializers.IntegerField(
        min_value=1, max_value=MAX_TTL_DAYS, required=False, help_text="default 30 (settings)"
    )


class LoginRequest(NewTokenRequest):
    username = serializers.CharField()
    password = serializers.CharField()


TOKEN = {
    "id": 7,
    "name": "laptop",
    "prefix": "sl_Xk3v9a",
    "created_at": "2026-12-03T10:00:00Z",
    "expires_at": "2027-01-02T10:00:00Z",
    "last_used_at": None,
    "revoked_at": None,
}
NEW_TOKEN_EXAMPLE = OpenApiExample(
    "A new token", value={"token": "sl_Xk3v9a…", **TOKEN}, response_only=True
)
TOKEN_EXAMPLE = OpenApiExample("A token", value=TOKEN, response_only=True)


def new_token_fields(data: dict[str, Any], *, also_known: set[str]) -> tuple[str, int | None]:
    """The name and lifetime asked for a new token; raise ValidationError naming bad fields.

    ``expires_in_days`` is a JSON whole number, or digits in a form-encoded login.
    """
    problems = unknown_fields(data, {"name", "expires_in_days", *also_known})
    name, days = data.get("name", "api"), data.get("expires_in_days")
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 100 or not name.isprintable():
        problems["name"] = ["must be a printable string of 1 to 100 characters"]
    if isinstance(days, str) and days.isascii() and days.isdigit() and len(days) < 4:
        days = int(days)
    if days is not None and (not is_whole_number(days) or not 1 <= days <= MAX_TTL_DAYS):
        problems["expires_in_days"] = [f"must be a whole number from 1 to {MAX_TTL_DAYS}"]
    if problems:
        raise ValidationError(problems)
    return name.strip(), days


def issued(user: Any, data: dict[str, Any], *, also_known: set[str], code: int) -> Response:
    name, days = new_token_fields(data, also_known=also_known)
    token, key = token_issue(user=user, name=name, ttl_days=days)
    return Response(
        NewTokenSerializer({"token": key, **TokenSerializer(token).data}).data,  # type: ignore[arg-type]
        status=code,
    )


class TokenLogin(APIView):
    """Exchange a username and password for a new token (JSON or form body)."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = (LoginIPThrottle, LoginUsernameThrottle)
    parser_classes = (BoundedJSONParser, FormParser, MultiPartParser)

    @extend_schema(
        operation_id="auth_token_create",
        auth=[],
        request=LoginRequest,
        responses={200: NewTokenSerializer, **errors(400, 429)},
        examples=[
            OpenApiExample(
                "Log in",
                value={"username": "alice", "password": "…", "name": "laptop"},
                request_only=True,
            ),
            NEW_TOKEN_EXAMPLE,
        ],
    )
    def post(self, request: Request) -> Response:
        data = body_object(request.data.dict() if hasattr(request.data, "dict") else request.data)
        username, password = data.get("username"), data.get("password")
        if not isinstance(username, str) or not isinstance(password, str):
            raise ValidationError({"credentials": ["username and password are required strings"]})
        # The Django request, not DRF's: django-axes records the attempt on it.
        user = authenticate(request._request, username=username, password=password)
        if user is None:
            raise ValidationError(
                {"credentials": ["no active user with this username and password"]}
            )
        # 200, not 201: a login, answered as it always was.
        return issued(user, data, also_known={"username", "password"}, code=status.HTTP_200_OK)

    @extend_schema(
        operation_id="auth_token_revoke_current",
        request=None,
        responses={200: TokenSerializer, **errors()},
        examples=[TOKEN_EXAMPLE],
    )
    def delete(self, request: Request) -> Response:
        """Log out: revoke the token that authenticates this request."""
        found = ExpiringTokenAuthentication().authenticate(request)
        if found is None:
            raise NotAuthenticated("Send the token to revoke in the Authorization header.")
        return Response(TokenSerializer(token_revoke(token=found[1])).data)


class TokenListCreate(APIView):
    @extend_schema(
        operation_id="auth_tokens_list",
        responses={200: TokenSerializer(many=True), **errors()},
        examples=[OpenApiExample("Your tokens", value=[TOKEN], response_only=True)],
    )
    def get(self, request: Request) -> Response:
        return Response(TokenSerializer(tokens_of(request.user), many=True).data)

    @extend_schema(
        operation_id="auth_tokens_create",
        request=NewTokenRequest,
        responses={201: NewTokenSerializer, **errors(400)},
        examples=[
            OpenApiExample(
                "A CI token", value={"name": "ci", "expires_in_days": 7}, request_only=True
            ),
            NEW_TOKEN_EXAMPLE,
        ],
    )
    def post(self, request: Request) -> Response:
        return issued(
            request.user, body_object(request.data), also_known=set(), code=status.HTTP_201_CREATED
        )


class TokenRevoke(APIView):
    @extend_schema(
        operation_id="auth_tokens_revoke",
        request=None,
        responses={200: TokenSerializer, **errors(404)},
        examples=[TOKEN_EXAMPLE],
    )
    def delete(self, request: Request, token_id: int) -> Response:
        """Revoke one of your tokens; the answer shows it with ``revoked_at`` set."""
        token = token_revoke(token=get_object_or_404(tokens_of(request.user), pk=token_id))
        return Response(TokenSerializer(token).data)
