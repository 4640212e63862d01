"""REST API v1 for a job's artifacts: list them, download one, delete them all (finished jobs).

    GET    /api/v1/jobs/<id>/artifacts/         files under the job's folder, with sizes
    GET    /api/v1/jobs/<id>/artifacts/<path>   one file (attachment)
    DELETE /api/v1/jobs/<id>/artifacts/         a finished job's folder; frees storage quota

Another tenant's job is a 404 like a missing one; a path that could leave the job's folder
is a 400 naming ``path``; a link or a missing file is a 404.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.jobs import artifacts
from controlplane.jobs.access import get_actable_job_for, get_job_for
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_delete_artifacts
from controlplane.lib.api_schema import errors


class ArtifactSerializer(serializers.Serializer[Any]):
    path = serializers.CharField(help_text="relative to the job's folder; append it to the URL")
    size = serializers.IntegerField(help_text="bytes")
    modified = serializers.DateTimeField()


class ListingSerializer(serializers.Serializer[Any]):
    files = ArtifactSerializer(many=True)
    file_count = serializers.IntegerField()
    total_bytes = serializers.IntegerField()
    truncated = serializers.BooleanField(help_text=f"more than {artifacts.LIST_LIMIT} files")


class JobArtifacts(APIView):
    @extend_schema(
        operation_id="jobs_artifacts_list",
        responses={200: ListingSerializer, **errors(404)},
        examples=[
            OpenApiExample(
                "A checkpoint and a summary",
                response_only=True,
                value={
                    "files": [
                        {
                            "path": "ckpt-00000200.pt",
                            "size": 1048576,
                            "modified": "2026-01-05T10:05:00Z",
                        },
                        {"path": "summary.json", "size": 312, "modified": "2026-01-05T10:05:01Z"},
                    ],
                    "file_count": 2,
                    "total_bytes": 1048888,
                    "truncated": False,
                },
            )
        ],
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = get_job_for(request.user, job_id)
        return Response(ListingSerializer(artifacts.list_artifacts(job.run_dir)).data)

    @extend_schema(operation_id="jobs_artifacts_delete", responses={204: None, **errors(404, 409)})
    def delete(self, request: Request, job_id: int) -> Response:
        """204; a 409 (ArtifactsInUse, via the API error handler) while the job has not ended."""
        job_delete_artifacts(job=get_actable_job_for(request.user, job_id), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobArtifactDownload(APIView):
    @extend_schema(
        operation_id="jobs_artifacts_download",
        responses={(200, "application/octet-stream"): bytes, **errors(400, 404)},
    )
    def get(self, request: Request, job_id: int, path: str) -> FileResponse:
        return artifact_response(get_job_for(request.user, job_id), path)


def artifact_response(job: Job, path: str) -> FileResponse:
    """The file ``path`` of ``job`` as a download (the page's view serves it the same way).

    Raises ValidationError (400, field ``path``) or Http404.
    """
    try:
        fh, size = artifacts.open_artifact(job.run_dir, path)
    except artifacts.ArtifactPathError as exc:
        raise ValidationError({"path": [str(exc)]}) from None
    except FileNotFoundError:
        raise Http404("No such artifact") from None
    response = FileResponse(fh, as_attachment=True, filename=path.rsplit("/", 1)[-1])
    response["Content-Length"] = str(size)
    return response
