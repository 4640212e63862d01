"""REST API v1 for jobs. Views validate, call one service, and serialise."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.jobs.access import (
    get_actable_job_for,
    get_job_for,
    get_tenant_admin_job_for,
    jobs_for,
)
from controlplane.jobs.choices import PriorityClass
from controlplane.jobs.models import Job
from controlplane.jobs.services import job_cancel, job_set_priority, job_submit, queue_position
from controlplane.jobs.spec import JobSpec, SpecError
from controlplane.tenancy.access import acting_tenants_for


class JobSerializer(serializers.ModelSerializer[Job]):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
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
            "status",
            "status_reason",
            "wait_code",
            "queue_position",
            "created_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "placement",
            "allocation_mbps",
            "restarts",
            "exit_code",
            "exit_reason",
            "checkpoint_step",
            "last_step",
            "cancel_requested",
            "preempt_requested",
        ]
        read_only_fields = fields

    def get_queue_position(self, job: Job) -> int | None:
        return queue_position(job)


class JobListCreate(APIView):
    def get(self, request: Request) -> Response:
        jobs = jobs_for(request.user).order_by("-created_at", "-id")
        status_filter = request.query_params.get("status")
        if status_filter:
            jobs = jobs.filter(status=status_filter)
        return Response(JobSerializer(jobs[:200], many=True).data)

    def post(self, request: Request) -> Response:
        data: Any = request.data
        slug = data.get("tenant") if hasattr(data, "get") else None
        tenant = acting_tenants_for(request.user).filter(slug=slug).first() if slug else None
        errors: dict[str, list[str]] = {}
        if tenant is None:
            errors["tenant"] = [
                "is required" if not slug else f"no tenant {slug!r} you can submit to"
            ]
        try:
            spec = JobSpec.from_input(data if hasattr(data, "get") else {})
        except SpecError as exc:
            errors.update(exc.errors)
        if not errors:
            try:
                job = job_submit(tenant=tenant, spec=spec, actor=request.user)
            except SpecError as exc:
                errors.update(exc.errors)
        if errors:
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)


class JobDetail(APIView):
    def get(self, request: Request, job_id: int) -> Response:
        return Response(JobSerializer(get_job_for(request.user, job_id)).data)


class JobCancel(APIView):
    def post(self, request: Request, job_id: int) -> Response:
        job = job_cancel(job=get_actable_job_for(request.user, job_id), actor=request.user)
        return Response(JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class JobPriority(APIView):
    """POST {"priority": "high"}: tenant admins (and site admins) change a job's priority."""

    def post(self, request: Request, job_id: int) -> Response:
        job = get_tenant_admin_job_for(request.user, job_id)
        name = request.data.get("priority") if hasattr(request.data, "get") else None
        priority = PriorityClass.from_name(str(name)) if name is not None else None
        if priority is None:
            names = ", ".join(str(c.label) for c in PriorityClass)
            return Response(
                {"priority": [f"must be one of {names}"]}, status=status.HTTP_400_BAD_REQUEST
            )
        job = job_set_priority(job=job, priority=priority.value, actor=request.user)
        return Response(JobSerializer(job).data)
