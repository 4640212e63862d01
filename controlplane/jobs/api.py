"""REST API v1 for jobs. Views validate, call one service, and serialise.

Every view declares its OpenAPI schema (``extend_schema``): request, responses, the error
statuses it can answer (``errors``) and an example.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from django.contrib.auth.models import User
from django.http import FileResponse, Http404
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.bundles.api import archive_response
from controlplane.bundles.services import bundle_mark_used, job_id_from_token
from controlplane.jobs import idempotency
from controlplane.jobs.access import (
    get_actable_job_for,
    get_job_for,
    get_tenant_admin_job_for,
    jobs_for,
)
from controlplane.jobs.choices import ACTIVE, JobStatus, PriorityClass, SyncStrategy, Workload
from controlplane.jobs.models import Job, JobEvent
from controlplane.jobs.services import (
    batch_limit,
    job_cancel,
    job_set_priority,
    job_submit,
    jobs_submit,
    queue_position,
)
from controlplane.jobs.spec import MAX_RESTARTS_LIMIT, JobSpec, SpecError
from controlplane.lib.api_schema import ERROR_REF, errors
from controlplane.lib.pagination import NewestFirst
from controlplane.lib.parsers import body_object
from controlplane.lib.strict import unknown_fields
from controlplane.tenancy.access import acting_tenants_for
from controlplane.tenancy.models import Tenant

# A tenant slug as the URL converter <slug:…> accepts it.
SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")


class JobSerializer(serializers.ModelSerializer[Job]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    priority = serializers.CharField(source="priority_name", read_only=True)
    queue_position = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "tenant",
            "name",
            "workload",
            "world_size",
            "steps",
            "sync",
            "priority",
            "deadline",
            "bandwidth_floor_mbps",
            "bandwidth_ceiling_mbps",
            "hyperparameters",
            "bundle",
            "bundle_sha256",
            "bundle_file_count",
            "entrypoint",
            "env",
            "status",
            "status_reason",
            "wait_code",
            "queue_position",
            "created_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "node_selector",
            "placement",
            "allocation_mbps",
            "restarts",
            "max_restarts",
            "exit_code",
            "exit_reason",
            "checkpoint_step",
            "resumed_from_step",
            "last_step",
            "cancel_requested",
            "preempt_requested",
        ]
        read_only_fields = fields

    def get_queue_position(self, job: Job) -> int | None:
        return queue_position(job)


class JobSubmitSerializer(serializers.Serializer[Any]):
    """The submit body, for the schema. ``JobSpec.from_input`` is what validates it."""

    tenant = serializers.SlugField(help_text="slug of a tenant you may submit to")
    name = serializers.CharField(max_length=100)
    workload = serializers.ChoiceField(choices=Workload.choices, required=False)
    world_size = serializers.IntegerField(min_value=1, help_text="ranks (slots) the run needs")
    steps = serializers.IntegerField(min_value=1)
    sync = serializers.ChoiceField(choices=SyncStrategy.choices, default=SyncStrategy.FULL)
    priority = serializers.ChoiceField(
        choices=[str(c.label) for c in PriorityClass], default="normal"
    )
    deadline = serializers.DateTimeField(required=False, allow_null=True)
    bandwidth_floor_mbps = serializers.IntegerField(min_value=0, default=0)
    bandwidth_ceiling_mbps = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    hyperparameters = serializers.DictField(
        child=serializers.FloatField(), required=False, help_text="lr, batch_size, seq_len, …"
    )
    max_restarts = serializers.IntegerField(
        min_value=0,
        max_value=MAX_RESTARTS_LIMIT,
        required=False,
        allow_null=True,
        help_text="restarts after failed attempts before the job fails (default: the platform's)",
    )
    code = serializers.CharField(
        required=False, help_text="instead of workload: a bundle of this tenant (id or sha256)"
    )
    entrypoint = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text='with code: ["train.py", "--lr", "0.1"] or ["-m", "pkg.train"] '
        "(a string is split like a shell)",
    )
    env = serializers.DictField(
        child=serializers.CharField(),
        required=False,
        help_text="with code: extra variables (not SYNCLANE_*, TORCH*, MASTER_*, RANK*, …)",
    )
    node_selector = serializers.DictField(
        child=serializers.CharField(),
        required=False,
        help_text='labels every node of the job must carry, e.g. {"gpu": "h200"}',
    )


ORDERING_FIELDS = ("created_at", "id", "name", "priority", "status")


class JobFilterSerializer(serializers.Serializer[Any]):
    """Query filters of the job list; a bad value is a 400 naming the parameter."""

    status = serializers.ChoiceField(choices=JobStatus.choices, required=False)
    tenant = serializers.SlugField(required=False, help_text="tenant slug")
    name = serializers.CharField(required=False, max_length=100, help_text="name contains")
    ordering = serializers.CharField(
        required=False,
        max_length=200,
        help_text=f"comma-separated, of {', '.join(ORDERING_FIELDS)}; a leading - reverses",
    )

    def validate_ordering(self, value: str) -> str:
        unknown = [t for t in value.split(",") if t.strip().lstrip("-") not in ORDERING_FIELDS]
        if unknown:
            raise serializers.ValidationError(
                f"{', '.join(unknown)}: not one of {', '.join(ORDERING_FIELDS)}"
            )
        return value


class PrioritySerializer(serializers.Serializer[Any]):
    priority = serializers.ChoiceField(choices=[str(c.label) for c in PriorityClass])


class JobEventSerializer(serializers.ModelSerializer[JobEvent]):
    actor: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = JobEvent
        fields = ["id", "created_at", "from_status", "to_status", "reason", "actor"]
        read_only_fields = fields


DEMO_SPEC = {
    "tenant": "vision",
    "name": "demo",
    "workload": "tiny_gpt",
    "world_size": 2,
    "steps": 200,
    "sync": "full",
    "priority": "normal",
}
SUBMIT_EXAMPLE = OpenApiExample("Submit a 2-rank tiny GPT", request_only=True, value=DEMO_SPEC)
JOB_EXAMPLE = OpenApiExample(
    "A queued job",
    response_only=True,
    status_codes=["200", "201", "202"],
    value={
        "id": 7,
        **DEMO_SPEC,
        "deadline": None,
        "bandwidth_floor_mbps": 0,
        "bandwidth_ceiling_mbps": None,
        "hyperparameters": {},
        "status": "queued",
        "status_reason": "waiting for 2 slots",
        "wait_code": "slots",
        "queue_position": 1,
        "created_at": "2026-01-05T10:00:00Z",
        "admitted_at": None,
        "started_at": None,
        "finished_at": None,
        "node_selector": {},
        "placement": {},
        "allocation_mbps": None,
        "restarts": 0,
        "max_restarts": None,
        "exit_code": None,
        "exit_reason": "",
        "checkpoint_step": None,
        "resumed_from_step": None,
        "last_step": None,
        "cancel_requested": False,
        "preempt_requested": False,
    },
)


IDEMPOTENCY_PARAMETER = OpenApiParameter(
    idempotency.HEADER,
    str,
    location=OpenApiParameter.HEADER,
    required=False,
    description="makes retries safe: the same key (yours, within "
    "SYNCLANE_IDEMPOTENCY_WINDOW_S) with the same body answers the first "
    "answer again (header Idempotent-Replayed: true) instead of a second job; "
    "with another body it is a 422",
)
SUBMIT_ERRORS = {
    **errors(400),
    422: OpenApiResponse(ERROR_REF, description="The Idempotency-Key was used with another body."),
}
BATCH_ITEM = {k: v for k, v in DEMO_SPEC.items() if k != "tenant"}


class JobListCreate(generics.GenericAPIView[Job]):
    """Jobs of your tenants (filtered, ordered, cursor-paginated) and job submission."""

    serializer_class = JobSerializer
    pagination_class = NewestFirst
    filter_backends = [OrderingFilter]
    ordering_fields = list(ORDERING_FIELDS)

    def get_queryset(self) -> Any:
        return jobs_for(self.request.user)

    @extend_schema(
        operation_id="jobs_list",
        parameters=[JobFilterSerializer],
        responses={200: JobSerializer(many=True), **errors(400)},
        examples=[JOB_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        filters = JobFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        jobs = self.filter_queryset(self.get_queryset())
        wanted = filters.validated_data
        if "status" in wanted:
            jobs = jobs.filter(status=wanted["status"])
        if "tenant" in wanted:
            jobs = jobs.filter(tenant__slug=wanted["tenant"])
        if "name" in wanted:
            jobs = jobs.filter(name__icontains=wanted["name"])
        page = self.paginate_queryset(jobs)
        return self.get_paginated_response(JobSerializer(page, many=True).data)

    @extend_schema(
        operation_id="jobs_submit",
        request=JobSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={201: JobSerializer, **SUBMIT_ERRORS},
        examples=[SUBMIT_EXAMPLE, JOB_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        data = body_object(request.data)
        return _answer(request, data, lambda: _created(self._submit(request, data)))

    def _submit(self, request: Request, data: dict[str, Any]) -> Job:
        """Validate and submit; raise ValidationError (nothing written) when refused."""
        problems: dict[str, list[str]] = {}
        tenant = _acting_tenant(request.user, data.get("tenant"), problems)
        try:
            spec = JobSpec.from_input(data, also_known={"tenant"})
        except SpecError as exc:
            problems.update(exc.errors)
        if not problems and tenant is not None:  # no problems: the tenant was found
            try:
                return job_submit(tenant=tenant, spec=spec, actor=request.user)
            except SpecError as exc:
                problems.update(exc.errors)
        raise ValidationError(problems)


def _created(job: Job) -> tuple[Job, int, dict[str, Any]]:
    return job, status.HTTP_201_CREATED, dict(JobSerializer(job).data)


def _answer(
    request: Request, data: dict[str, Any], submit: Callable[[], tuple[Job, int, dict[str, Any]]]
) -> Response:
    """Run ``submit`` (which raises ValidationError when refused) and answer with what it
    made; with an Idempotency-Key, once per key and body (a retry gets the first answer)."""
    try:
        key = idempotency.parse_key(request.headers.get(idempotency.HEADER))
    except idempotency.MalformedKey as exc:
        raise ValidationError({idempotency.HEADER: [str(exc)]}) from None
    if key is None:
        _, status_code, body = submit()
        return Response(body, status=status_code)
    try:
        answer = idempotency.submit_once(
            user=cast(User, request.user),  # IsAuthenticated: never anonymous here
            key=key,
            data=data,
            submit=submit,
        )
    except idempotency.KeyReused as exc:
        body = {"detail": f"{idempotency.HEADER} {exc}", idempotency.HEADER: [str(exc)]}
        return Response(body, status=exc.status)
    headers = {idempotency.REPLAYED_HEADER: "true"} if answer.replayed else {}
    return Response(answer.body, status=answer.status_code, headers=headers)


class JobBatchSubmitSerializer(serializers.Serializer[Any]):
    """The batch submit body, for the schema (``JobBatchCreate`` validates it)."""

    tenant = serializers.SlugField(help_text="slug of a tenant you may submit to")
    jobs = serializers.ListField(
        child=JobSubmitSerializer(),
        min_length=1,
        help_text="job bodies as /api/v1/jobs/ takes them, without tenant; at most "
        "SYNCLANE_SUBMIT_BATCH_MAX",
    )


class JobBatchSerializer(serializers.Serializer[Any]):
    jobs = JobSerializer(many=True)


class JobBatchCreate(APIView):
    """Submit many jobs of one tenant in one request (a sweep): all are queued, or none."""

    @extend_schema(
        operation_id="jobs_submit_batch",
        request=JobBatchSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={201: JobBatchSerializer, **SUBMIT_ERRORS},
        examples=[
            OpenApiExample(
                "Submit three learning rates",
                request_only=True,
                value={
                    "tenant": "vision",
                    "jobs": [
                        {**BATCH_ITEM, "name": f"lr-{lr}", "hyperparameters": {"lr": lr}}
                        for lr in (0.1, 0.03, 0.01)
                    ],
                },
            ),
            OpenApiExample(
                "Three queued jobs",
                response_only=True,
                status_codes=["201"],
                value={
                    "jobs": [
                        {
                            **JOB_EXAMPLE.value,
                            "id": 7 + i,
                            "name": f"lr-{lr}",
                            "queue_position": i + 1,
                        }
                        for i, lr in enumerate((0.1, 0.03, 0.01))
                    ]
                },
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        """A refused job is a 400 naming it (``jobs[3].world_size``), and nothing is written."""
        data = body_object(request.data)
        return _answer(request, data, lambda: self._submit(request, data))

    def _submit(self, request: Request, data: dict[str, Any]) -> tuple[Job, int, dict[str, Any]]:
        problems = unknown_fields(data, {"tenant", "jobs"})
        tenant = _acting_tenant(request.user, data.get("tenant"), problems)
        items = data.get("jobs")
        limit = batch_limit()
        specs: list[JobSpec] = []
        if not isinstance(items, list) or not 1 <= len(items) <= limit:
            problems["jobs"] = [f"must be a list of 1 to {limit} job objects"]
            items = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                problems[f"jobs[{i}]"] = ["must be a job object"]
                continue
            try:
                specs.append(JobSpec.from_input(item))
            except SpecError as exc:
                problems.update({f"jobs[{i}].{k}": why for k, why in exc.errors.items()})
        if not problems and tenant is not None:
            try:
                jobs = jobs_submit(tenant=tenant, specs=specs, actor=request.user)
            except SpecError as exc:
                problems.update(exc.errors)
            else:
                body = {"jobs": JobSerializer(jobs, many=True).data}
                return jobs[0], status.HTTP_201_CREATED, body
        raise ValidationError(problems)


def _acting_tenant(user: Any, slug: Any, errors: dict[str, list[str]]) -> Tenant | None:
    """The tenant the user may submit to named by ``slug``; else None and an error in ``errors``.

    The slug is checked before the query: an object or a NUL byte never reaches the database.
    """
    if slug is None:
        errors["tenant"] = ["is required"]
    elif not isinstance(slug, str) or not SLUG.fullmatch(slug):
        errors["tenant"] = ["must be a tenant slug (letters, digits, - and _)"]
    else:
        tenant = acting_tenants_for(user).filter(slug=slug).first()
        if tenant is not None:
            return tenant
        errors["tenant"] = [f"no tenant {slug!r} you can submit to"]
    return None


class JobDetail(APIView):
    @extend_schema(
        operation_id="jobs_get",
        responses={200: JobSerializer, **errors(404)},
        examples=[JOB_EXAMPLE],
    )
    def get(self, request: Request, job_id: int) -> Response:
        return Response(JobSerializer(get_job_for(request.user, job_id)).data)


class JobCancel(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        request=None,
        responses={202: JobSerializer, **errors(404)},
        examples=[JOB_EXAMPLE],
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = job_cancel(job=get_actable_job_for(request.user, job_id), actor=request.user)
        return Response(JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class JobPriority(APIView):
    """POST {"priority": "high"}: tenant admins (and site admins) change a job's priority."""

    @extend_schema(
        operation_id="jobs_set_priority",
        request=PrioritySerializer,
        responses={200: JobSerializer, **errors(400, 404)},
        examples=[
            OpenApiExample("Raise to high", value={"priority": "high"}, request_only=True),
            JOB_EXAMPLE,
        ],
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = get_tenant_admin_job_for(request.user, job_id)
        data = body_object(request.data)
        problems = unknown_fields(data, {"priority"})
        name = data.get("priority")
        priority = PriorityClass.from_name(name) if isinstance(name, str) else None
        if priority is None:
            names = ", ".join(str(c.label) for c in PriorityClass)
            problems["priority"] = [f"must be one of {names}"]
        if problems or priority is None:
            raise ValidationError(problems)
        job = job_set_priority(job=job, priority=priority.value, actor=request.user)
        return Response(JobSerializer(job).data)


class JobEvents(generics.ListAPIView[JobEvent]):
    """A job's history: every status transition and note, oldest first."""

    serializer_class = JobEventSerializer
    pagination_class = None

    def get_queryset(self) -> Any:
        job = get_job_for(self.request.user, self.kwargs["job_id"])
        return job.events.select_related("actor")

    @extend_schema(
        operation_id="jobs_events",
        responses={200: JobEventSerializer(many=True), **errors(404)},
        examples=[
            OpenApiExample(
                "Submitted then admitted",
                response_only=True,
                value=[
                    {
                        "id": 1,
                        "created_at": "2026-01-05T10:00:00Z",
                        "from_status": "",
                        "to_status": "queued",
                        "reason": "submitted",
                        "actor": "alice",
                    },
                    {
                        "id": 2,
                        "created_at": "2026-01-05T10:00:01Z",
                        "from_status": "queued",
                        "to_status": "admitted",
                        "reason": "admitted: 2 slots within quota",
                        "actor": None,
                    },
                ],
            )
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class InternalBundleFetch(APIView):
    """GET /api/v1/internal/bundles/<sha256>/ with ``Authorization: Bundle <token>``.

    For workers: the token names one job (services.fetch_token); it downloads that job's
    bundle and nothing else, and only while the job holds slots. Any mismatch is a 404.
    """

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(exclude=True)  # workers' endpoint, not part of the public API
    def get(self, request: Request, sha256: str) -> FileResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        job_id = job_id_from_token(token.strip()) if scheme == "Bundle" else None
        job = (
            Job.objects.filter(pk=job_id, status__in=ACTIVE, bundle_sha256=sha256)
            .select_related("bundle")
            .first()
            if job_id is not None
            else None
        )
        if job is None or job.bundle is None:
            raise Http404("No such bundle")
        bundle_mark_used(bundle=job.bundle)
        return archive_response(job.bundle)
