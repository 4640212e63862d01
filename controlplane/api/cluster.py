"""REST API v1 for the cluster: nodes, bandwidth allocations, and the cluster page's share."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.dashboard import history
from controlplane.jobs.access import jobs_for
from controlplane.jobs.choices import ACTIVE, NodeState
from controlplane.jobs.models import Job, Node
from controlplane.jobs.nodes import node_cordon, node_drain, node_uncordon
from controlplane.lib.api_schema import errors
from controlplane.lib.parsers import body_object
from controlplane.lib.strict import unknown_fields
from controlplane.tenancy.access import tenants_for

NODE_STATES = [state.value for state in NodeState]


class NodeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    slots = serializers.IntegerField()
    used = serializers.IntegerField(help_text="slots your tenants' active jobs hold here")
    jobs = serializers.ListField(
        child=serializers.IntegerField(), help_text="your tenants' active jobs with ranks here"
    )
    state = serializers.ChoiceField(
        choices=NODE_STATES,
        help_text="ready; cordoned (no new placements); draining (cordoned, its jobs "
        "checkpoint and requeue); lost (silent longer than SYNCLANE_NODE_LOST_AFTER_S)",
    )
    state_reason = serializers.CharField(help_text="who set the state, and why")
    state_changed_at = serializers.DateTimeField(allow_null=True)
    link_state = serializers.ChoiceField(
        choices=["ok", "degraded", "down"], help_text="worst link state of your jobs here"
    )
    address = serializers.CharField(help_text="where other nodes reach it")
    labels = serializers.DictField(child=serializers.CharField())
    fabric_mbps = serializers.IntegerField()
    last_seen = serializers.DateTimeField(allow_null=True)
    alive = serializers.BooleanField(help_text="seen within SYNCLANE_NODE_LOST_AFTER_S")


class NodeActionSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(
        required=False, max_length=200, help_text="why (kept with the node's state)"
    )


class NodeDrainSerializer(NodeSerializer):
    requeued = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="jobs asked to checkpoint and requeue by this drain",
    )


NODE_EXAMPLE = {
    "name": "worker-1",
    "slots": 4,
    "used": 2,
    "jobs": [7],
    "state": "ready",
    "state_reason": "",
    "state_changed_at": None,
    "link_state": "ok",
    "address": "10.0.0.11",
    "labels": {"gpu": "h200", "zone": "a"},
    "fabric_mbps": 1000,
    "last_seen": "2026-01-05T10:00:00Z",
    "alive": True,
}


class AllocationSerializer(serializers.Serializer[Any]):
    job = serializers.IntegerField()
    name = serializers.CharField()
    tenant = serializers.SlugField()
    status = serializers.CharField()
    world_size = serializers.IntegerField()
    node = serializers.CharField(allow_null=True)
    allocation_mbps = serializers.FloatField(allow_null=True)
    bandwidth_floor_mbps = serializers.IntegerField()
    bandwidth_ceiling_mbps = serializers.IntegerField(allow_null=True)


class TimeSeriesSerializer(serializers.Serializer[Any]):
    x = serializers.ListField(child=serializers.CharField(), help_text="ISO 8601 times")
    y = serializers.ListField(child=serializers.FloatField())


class NamedSeriesSerializer(TimeSeriesSerializer):
    name = serializers.CharField(help_text="job id and name")


class ShareSerializer(serializers.Serializer[Any]):
    allocation = serializers.DictField(
        child=TimeSeriesSerializer(), help_text="Mbit/s allocated, per tenant, 5 s buckets"
    )
    throughput = serializers.DictField(
        child=NamedSeriesSerializer(), help_text="samples/s, per job id"
    )


class ClusterShare(APIView):
    """The last 15 minutes of the cluster page: allocation by tenant, throughput per job."""

    @extend_schema(
        operation_id="cluster_share",
        responses={200: ShareSerializer, **errors()},
        examples=[
            OpenApiExample(
                "One tenant, one job",
                response_only=True,
                value={
                    "allocation": {
                        "vision": {
                            "x": ["2026-01-05T10:00:00+00:00", "2026-01-05T10:00:05+00:00"],
                            "y": [500.0, 500.0],
                        }
                    },
                    "throughput": {
                        "7": {
                            "name": "7 demo",
                            "x": ["2026-01-05T10:00:01+00:00"],
                            "y": [385.6],
                        }
                    },
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        return Response(history.cluster_share(tenants_for(request.user)))


class NodeList(APIView):
    """Nodes, their state, slots and what your tenants' jobs use on each (as the cluster page)."""

    @extend_schema(
        operation_id="nodes_list",
        responses={200: NodeSerializer(many=True), **errors()},
        examples=[OpenApiExample("One node", response_only=True, value=[NODE_EXAMPLE])],
    )
    def get(self, request: Request) -> Response:
        nodes = history.cluster_nodes(jobs_for(request.user))
        return Response(NodeSerializer(nodes, many=True).data)


def node_view(request: Request, name: str) -> dict[str, Any]:
    """The node as the user sees it (``cluster_nodes``' row)."""
    for node in history.cluster_nodes(jobs_for(request.user)):
        if node["name"] == name:
            return node
    raise Http404("No such node")


def _admin_node(request: Request, name: str) -> Node:
    """The node ``name`` for a site admin; 403 for anyone else, 404 if there is none."""
    if not request.user.is_superuser:
        raise PermissionDenied("Only site admins cordon, drain and uncordon nodes.")
    try:
        return Node.objects.get(name=name)
    except Node.DoesNotExist:
        raise Http404("No such node") from None


def _reason(request: Request) -> str:
    """The optional ``reason`` of a node action's body; 400 naming the field if it is bad."""
    data = body_object(request.data)
    problems = unknown_fields(data, {"reason"})
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        problems["reason"] = ["must be a string"]
    elif len(reason) > 200:
        problems["reason"] = ["must be at most 200 characters"]
    if problems:
        raise ValidationError(problems)
    return reason


def _node_action(operation_id: str, summary: str, *, drain: bool = False) -> Any:
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        request=NodeActionSerializer,
        responses={200: NodeDrainSerializer if drain else NodeSerializer, **errors(400, 403, 404)},
        examples=[
            OpenApiExample("A reason", value={"reason": "kernel update"}, request_only=True),
            OpenApiExample(
                "The node now",
                response_only=True,
                value={
                    **NODE_EXAMPLE,
                    "state": "draining" if drain else "cordoned",
                    "state_reason": f"{'drained' if drain else 'cordoned'} by admin: kernel update",
                    "state_changed_at": "2026-01-05T10:00:00Z",
                    **({"requeued": [7]} if drain else {}),
                },
            ),
        ],
    )


class NodeCordon(APIView):
    """Site admins: no new placements on this node; what runs there keeps running."""

    @_node_action("nodes_cordon", "Cordon a node")
    def post(self, request: Request, name: str) -> Response:
        node = _admin_node(request, name)
        node_cordon(node=node, actor=request.user, reason=_reason(request))
        return Response(NodeSerializer(node_view(request, name)).data)


class NodeDrain(APIView):
    """Site admins: cordon the node, then each job on it checkpoints and goes back to the queue.

    The node shows ``draining`` until it holds no job, then ``cordoned``.
    """

    @_node_action("nodes_drain", "Drain a node", drain=True)
    def post(self, request: Request, name: str) -> Response:
        node = _admin_node(request, name)
        _, requeued = node_drain(node=node, actor=request.user, reason=_reason(request))
        data = {**node_view(request, name), "requeued": requeued}
        return Response(NodeDrainSerializer(data).data)


class NodeUncordon(APIView):
    """Site admins: the node takes new placements again (from cordoned or draining)."""

    @_node_action("nodes_uncordon", "Uncordon a node")
    def post(self, request: Request, name: str) -> Response:
        node = _admin_node(request, name)
        _reason(request)  # the body is checked like the others' (a reason is not kept)
        node_uncordon(node=node, actor=request.user)
        return Response(NodeSerializer(node_view(request, name)).data)


class AllocationList(APIView):
    """Bandwidth allocated to each active job of your tenants, with its floor and ceiling."""

    @extend_schema(
        operation_id="allocations_list",
        responses={200: AllocationSerializer(many=True), **errors()},
        examples=[
            OpenApiExample(
                "One running job",
                response_only=True,
                value=[
                    {
                        "job": 7,
                        "name": "demo",
                        "tenant": "vision",
                        "status": "running",
                        "world_size": 2,
                        "node": "worker-1",
                        "allocation_mbps": 500.0,
                        "bandwidth_floor_mbps": 0,
                        "bandwidth_ceiling_mbps": None,
                    }
                ],
            )
        ],
    )
    def get(self, request: Request) -> Response:
        jobs = jobs_for(request.user).filter(status__in=ACTIVE).order_by("tenant__slug", "pk")
        return Response(AllocationSerializer([allocation_of(j) for j in jobs], many=True).data)


def allocation_of(job: Job) -> dict[str, Any]:
    return {
        "job": job.pk,
        "name": job.name,
        "tenant": job.tenant.slug,
        "status": job.status,
        "world_size": job.world_size,
        "node": (job.placement or {}).get("node"),
        "allocation_mbps": job.allocation_mbps,
        "bandwidth_floor_mbps": job.bandwidth_floor_mbps,
        "bandwidth_ceiling_mbps": job.bandwidth_ceiling_mbps,
    }
