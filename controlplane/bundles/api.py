"""REST API v1 for code bundles, and the workers' internal download endpoint."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.bundles.access import bundles_for, get_actable_bundle_for, get_bundle_for
from controlplane.bundles.models import CodeBundle
from controlplane.bundles.services import (
    BundleError,
    bundle_delete,
    bundle_upload,
)
from controlplane.bundles.storage import get_storage
from controlplane.lib.api_schema import errors
from controlplane.tenancy.access import acting_tenants_for

BUNDLE_EXAMPLE = OpenApiExample(
    "A bundle",
    response_only=True,
    value={
        "id": 3,
        "tenant": "vision",
        "sha256": "9f2c" + "0" * 60,
        "kind": "tar.gz",
        "filename": "mnist-mlp.tar.gz",
        "size": 2048,
        "file_count": 3,
        "total_bytes": 5120,
        "python_files": ["model.py", "train.py"],
        "created_by": "alice",
        "created_at": "2026-01-05T10:00:00Z",
        "last_used_at": "2026-01-05T10:05:00Z",
    },
)
ARCHIVE = OpenApiResponse(OpenApiTypes.BINARY, description="the archive as uploaded")


class BundleSerializer(serializers.ModelSerializer[CodeBundle]):
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    created_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = CodeBundle
        fields = [
            "id",
            "tenant",
            "sha256",
            "kind",
            "filename",
            "size",
            "file_count",
            "total_bytes",
            "python_files",
            "created_by",
            "created_at",
            "last_used_at",
        ]
        read_only_fields = fields


class UploadSerializer(serializers.Serializer[Any]):
    """The upload form, for the schema; services.bundle_upload is what validates it."""

    tenant = serializers.SlugField(help_text="slug of a tenant you may submit to")
    file = serializers.FileField(help_text=".zip or .tar.gz (.tgz) of your code")


class BundleListCreate(APIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        operation_id="bundles_list",
        responses={200: BundleSerializer(many=True), **errors()},
        examples=[BUNDLE_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        bundles = bundles_for(request.user)
        tenant = request.query_params.get("tenant")
        if tenant:
            bundles = bundles.filter(tenant__slug=tenant)
        return Response(BundleSerializer(bundles[:200], many=True).data)

    @extend_schema(
        operation_id="bundles_upload",
        request={"multipart/form-data": UploadSerializer},
        responses={201: BundleSerializer, 200: BundleSerializer, **errors(400)},
        examples=[BUNDLE_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        """Multipart: ``tenant`` (slug) and ``file`` (.zip or .tar.gz) -> 201, or 200 if known."""
        data: Any = request.data
        slug = data.get("tenant")
        upload = request.FILES.get("file")
        errors: dict[str, list[str]] = {}
        tenant = acting_tenants_for(request.user).filter(slug=slug).first() if slug else None
        if tenant is None:
            errors["tenant"] = ["is required" if not slug else f"no tenant {slug!r} you can use"]
        if upload is None:
            errors["file"] = ["is required (a .zip or .tar.gz archive)"]
        if errors or tenant is None or upload is None:
            raise ValidationError(errors)
        try:
            bundle, created = bundle_upload(
                tenant=tenant,
                filename=upload.name or "",
                chunks=upload.chunks(),
                actor=request.user,
            )
        except BundleError as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(BundleSerializer(bundle).data, status=code)


class BundleDetail(APIView):
    @extend_schema(
        operation_id="bundles_get",
        responses={200: BundleSerializer, **errors(404)},
        examples=[BUNDLE_EXAMPLE],
    )
    def get(self, request: Request, bundle_id: int) -> Response:
        return Response(BundleSerializer(get_bundle_for(request.user, bundle_id)).data)

    @extend_schema(
        operation_id="bundles_delete",
        responses={204: None, **errors(404, 409)},
    )
    def delete(self, request: Request, bundle_id: int) -> Response:
        """204; a 409 (BundleInUse, via the API error handler) while a job still uses it."""
        bundle_delete(bundle=get_actable_bundle_for(request.user, bundle_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class BundleDownload(APIView):
    """GET: the archive itself, for members of its tenant."""

    @extend_schema(
        operation_id="bundles_download",
        responses={(200, "application/octet-stream"): ARCHIVE, **errors(404)},
    )
    def get(self, request: Request, bundle_id: int) -> FileResponse:
        return archive_response(get_bundle_for(request.user, bundle_id))


def archive_response(bundle: CodeBundle) -> FileResponse:
    """The bundle's archive as a download; Http404 if storage lost it."""
    try:
        stream = get_storage().open(bundle.tenant_id, bundle.sha256)
    except FileNotFoundError:
        raise Http404("The bundle's archive is gone") from None
    suffix = ".zip" if bundle.kind == "zip" else ".tar.gz"
    return FileResponse(
        stream,
        as_attachment=True,
        filename=f"bundle-{bundle.short_hash}{suffix}",
        content_type="application/octet-stream",
    )
