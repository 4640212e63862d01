"""REST API v1 for what runs report: metric history, links, logs and alarms of your jobs.

These read through the same helpers as the pages (``dashboard.history``, ``telemetry.logs``),
so the API shows exactly what a page shows.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.dashboard import history
from controlplane.jobs.access import get_job_for
from controlplane.jobs.placement import ranks_per_node
from controlplane.lib.api_schema import errors
from controlplane.lib.pagination import NewestRaisedFirst
from controlplane.telemetry import logs
from controlplane.telemetry.models import Alarm, AlarmKind, LinkState
from controlplane.telemetry.services import (
    alarm_acknowledge,
    alarms_for,
    filtered_alarms,
    get_actable_alarm_for,
)


class MetricsQuery(serializers.Serializer[Any]):
    after_step = serializers.IntegerField(
        min_value=0, required=False, help_text="only samples after this step (backfill)"
    )
    max_points = serializers.IntegerField(
        min_value=2, max_value=history.MAX_POINTS, default=history.MAX_POINTS
    )


class SeriesSerializer(serializers.Serializer[Any]):
    x = serializers.ListField(child=serializers.FloatField(), help_text="steps")
    y = serializers.ListField(child=serializers.FloatField())


class MetricsSerializer(serializers.Serializer[Any]):
    last_step = serializers.IntegerField(allow_null=True)
    metrics = serializers.DictField(
        child=SeriesSerializer(), help_text="loss, val_loss, samples_per_s, … (min/max downsampled)"
    )


class LinkSerializer(serializers.ModelSerializer[LinkState]):
    class Meta:
        model = LinkState
        fields = [
            "src",
            "dst",
            "state",
            "bandwidth_bps",
            "latency_s",
            "jitter_s",
            "reissued",
            "step",
            "measured_at",
        ]
        read_only_fields = fields


class LogsQuery(serializers.Serializer[Any]):
    rank = serializers.IntegerField(
        min_value=0,
        default=0,
        help_text="global rank (a run across nodes numbers its ranks node by node)",
    )
    stream = serializers.ChoiceField(
        choices=logs.STREAMS,
        default="stdout",
        help_text="torchrun: the output of the torchrun that runs `rank` (one per node)",
    )
    lines = serializers.IntegerField(min_value=1, max_value=1000, default=100)
    after = serializers.IntegerField(
        min_value=0, required=False, help_text="byte offset from a previous answer (follow)"
    )


class LogsSerializer(serializers.Serializer[Any]):
    rank = serializers.IntegerField()
    stream = serializers.CharField()
    offset = serializers.IntegerField(help_text="pass as `after` to read what comes next")
    lines = serializers.ListField(child=serializers.CharField(allow_blank=True))


class AlarmQuery(serializers.Serializer[Any]):
    state = serializers.ChoiceField(choices=["open", "cleared"], required=False)
    kind = serializers.ChoiceField(choices=AlarmKind.choices, required=False)
    tenant = serializers.SlugField(required=False)
    # Ids are BigAutoField: a larger number would overflow the database, not just miss.
    job = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)
    unacknowledged = serializers.BooleanField(required=False, default=False)


class AlarmSerializer(serializers.Serializer[Any]):
    """An alarm as ``history.alarm_json`` writes it (the live ``alarm`` message's fields)."""

    alarm_id = serializers.IntegerField()
    job = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=AlarmKind.choices)
    rank = serializers.IntegerField(allow_null=True)
    step = serializers.IntegerField(allow_null=True)
    value = serializers.FloatField(allow_null=True)
    threshold = serializers.FloatField(allow_null=True)
    detail = serializers.CharField(allow_blank=True)
    raised_at = serializers.DateTimeField()
    cleared_at = serializers.DateTimeField(allow_null=True)
    acknowledged = serializers.BooleanField()
    acknowledged_by = serializers.CharField(allow_null=True)

    def to_representation(self, instance: Alarm) -> dict[str, Any]:
        return history.alarm_json(instance)


ALARM_EXAMPLE = {
    "alarm_id": 3,
    "job": 7,
    "kind": "sync_drift",
    "rank": None,
    "step": 120,
    "value": 0.031,
    "threshold": 0.02,
    "detail": "parameter drift above threshold",
    "raised_at": "2026-01-05T10:02:00Z",
    "cleared_at": None,
    "acknowledged": False,
    "acknowledged_by": None,
}


class JobMetrics(APIView):
    """A job's metric history, min/max downsampled per series (what the job page draws)."""

    @extend_schema(
        operation_id="jobs_metrics",
        parameters=[MetricsQuery],
        responses={200: MetricsSerializer, **errors(400, 404)},
        examples=[
            OpenApiExample(
                "Loss over three kept steps",
                response_only=True,
                value={
                    "last_step": 30,
                    "metrics": {"loss": {"x": [10, 20, 30], "y": [4.1, 3.2, 2.9]}},
                },
            )
        ],
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = get_job_for(request.user, job_id)
        query = MetricsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = history.job_history(
            job,
            after_step=query.validated_data.get("after_step"),
            max_points=query.validated_data["max_points"],
        )
        return Response({"last_step": data["last_step"], "metrics": data["metrics"]})


class JobLinks(generics.ListAPIView[LinkState]):
    """The latest measurement of every rank-to-rank link of a job."""

    serializer_class = LinkSerializer
    pagination_class = None

    def get_queryset(self) -> Any:
        return get_job_for(self.request.user, self.kwargs["job_id"]).links.all()

    @extend_schema(
        operation_id="jobs_links",
        responses={200: LinkSerializer(many=True), **errors(404)},
        examples=[
            OpenApiExample(
                "One healthy pair",
                response_only=True,
                value=[
                    {
                        "src": 0,
                        "dst": 1,
                        "state": "ok",
                        "bandwidth_bps": 9.6e8,
                        "latency_s": 0.0004,
                        "jitter_s": 0.0001,
                        "reissued": False,
                        "step": 40,
                        "measured_at": "2026-01-05T10:01:00Z",
                    }
                ],
            )
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class JobLogs(APIView):
    """A rank's log (newest attempt): the last ``lines`` lines, or what follows ``after``."""

    @extend_schema(
        operation_id="jobs_logs",
        parameters=[LogsQuery],
        responses={200: LogsSerializer, **errors(400, 404)},
        examples=[
            OpenApiExample(
                "Tail of rank 0",
                response_only=True,
                value={
                    "rank": 0,
                    "stream": "stdout",
                    "offset": 2048,
                    "lines": ["step 40 loss 2.91", "step 50 loss 2.85"],
                },
            )
        ],
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = get_job_for(request.user, job_id)
        query = LogsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        nodes = ranks_per_node(job.placement)  # a run across nodes: read by global rank
        path = logs.log_path(job.run_dir, rank=q["rank"], stream=q["stream"], nodes=nodes)
        if "after" in q:
            offset, lines = logs.read_after(path, q["after"])
        else:
            offset = logs.size_of(path)
            lines = logs.tail(path, lines=q["lines"]) if path is not None else []
        return Response(
            {"rank": q["rank"], "stream": q["stream"], "offset": offset, "lines": lines}
        )


class AlarmList(generics.GenericAPIView[Alarm]):
    """Alarms of your tenants' jobs, newest first, filtered like the alarms page."""

    serializer_class = AlarmSerializer
    pagination_class = NewestRaisedFirst

    @extend_schema(
        operation_id="alarms_list",
        parameters=[AlarmQuery],
        responses={200: AlarmSerializer(many=True), **errors(400)},
        examples=[OpenApiExample("An open drift alarm", value=ALARM_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request) -> Response:
        query = AlarmQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        alarms = filtered_alarms(alarms_for(request.user), query.validated_data)
        page = self.paginate_queryset(alarms) or []  # None only without a paginator
        return self.get_paginated_response([history.alarm_json(a) for a in page])


class AlarmAcknowledge(APIView):
    @extend_schema(
        operation_id="alarms_acknowledge",
        request=None,
        responses={200: AlarmSerializer, **errors(404)},
        examples=[
            OpenApiExample(
                "Acknowledged",
                response_only=True,
                value={**ALARM_EXAMPLE, "acknowledged": True, "acknowledged_by": "alice"},
            )
        ],
    )
    def post(self, request: Request, alarm_id: int) -> Response:
        alarm = alarm_acknowledge(
            alarm=get_actable_alarm_for(request.user, alarm_id), actor=request.user
        )
        return Response(history.alarm_json(alarm))
