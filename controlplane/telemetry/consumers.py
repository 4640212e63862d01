"""Websocket consumers: authenticate, check tenancy, join groups, forward.

    ws/jobs/<id>/        a job's status, metrics, link, alarm, allocation messages, and its
                         logs (``log``: every rank's new lines, after a bounded backlog)
    ws/tenants/<slug>/   a tenant's status, alarm, allocation and per-job metrics summaries
    ws/cluster/          everything cluster-wide; members only get their own tenants' share
    ws/alarms/           alarms (and acknowledgements) of every tenant the user belongs to

They never write to the database. Access is checked on connect and again whenever the
user's memberships change (``signals.ACCESS_CHANGED`` on the user's own group): a socket
that lost its right to listen is closed with 4404, like one that never had it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from controlplane.jobs.access import jobs_for
from controlplane.jobs.choices import JobStatus
from controlplane.jobs.placement import ranks_per_node
from controlplane.jobs.state import status_message
from controlplane.telemetry.groups import CLUSTER_GROUP, job_group, tenant_group, user_group
from controlplane.telemetry.logs import LogFollower
from controlplane.telemetry.metrics import WEBSOCKET_CLIENTS
from controlplane.tenancy.access import tenants_for

LOG_POLL_S = 0.5  # how often a job socket looks for new log lines

# Close codes (4000-4999 are free for applications).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class LiveConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Base: subclasses say which groups a user may join (``resolve``) and what to forward."""

    groups_joined: list[str]
    kind = "live"  # label of the websocket-clients metric

    async def resolve(self, user: Any) -> list[str] | None:
        """Return the groups ``user`` may join here, or None when the object is not theirs."""
        raise NotImplementedError

    async def greeting(self) -> list[dict[str, Any]]:
        """Messages sent right after accepting (e.g. the current status).

        Called after the socket joined its groups, so whatever it reads is at least as new
        as the last change it could have missed; a change after the join arrives as usual.
        """
        return []

    def allows(self, payload: dict[str, Any]) -> bool:
        """Return True if this socket forwards ``payload`` (all, unless narrowed)."""
        return True

    async def connect(self) -> None:
        self.groups_joined = []
        # Refusals accept first, then close with a code the page can act on (a refused
        # handshake would only show the browser a bare 403).
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        groups = await self.resolve(user)
        if groups is None:
            # Same answer for "missing" and "another tenant's": existence is not confirmed.
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self._join([*groups, user_group(user.pk)])
        await self.accept()
        self.counted = True
        WEBSOCKET_CLIENTS.labels(kind=self.kind).inc()
        for message in await self.greeting():
            await self.send_json(message)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "counted", False):
            WEBSOCKET_CLIENTS.labels(kind=self.kind).dec()
            self.counted = False
        await self._join([])

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # The socket is one-way (server -> browser); anything sent is ignored.
        return None

    async def forward(self, event: dict[str, Any]) -> None:
        if self.allows(event["payload"]):
            await self.send_json(event["payload"])

    async def forward_many(self, event: dict[str, Any]) -> None:
        """A batch from the ingest's fan-out: each payload is its own websocket message."""
        for payload in event["payloads"]:
            if self.allows(payload):
                await self.send_json(payload)

    async def access_changed(self, event: dict[str, Any]) -> None:
        """The user's memberships changed: re-resolve; close if nothing is left."""
        user = self.scope["user"]
        groups = await self.resolve(user)
        if groups is None:
            await self._join([])
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self._join([*groups, user_group(user.pk)])

    async def _join(self, groups: list[str]) -> None:
        """Make the joined groups exactly ``groups``."""
        for group in set(self.groups_joined) - set(groups):
            await self.channel_layer.group_discard(group, self.channel_name)
        for group in set(groups) - set(self.groups_joined):
            await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = list(groups)


class JobConsumer(LiveConsumer):
    """``ws/jobs/<id>/``: everything about one job of the user's tenants, and its logs.

    Logs are files in the run folder, not messages: each socket follows them itself (reads
    only, in a thread), sending a bounded backlog first and then new lines every LOG_POLL_S.
    This needs the run folder on this server's machine (a shared jobs folder for a run across
    nodes), whose ranks are followed by global rank from the job's placement; a ``running``
    status (the job may run on other nodes now) reads the placement again.
    """

    kind = "job"
    log_task: asyncio.Task[None] | None = None
    follower: LogFollower | None = None

    async def connect(self) -> None:
        await super().connect()
        if self.groups_joined:  # accepted: the job is the user's
            nodes = ranks_per_node(self.job.placement)
            self.follower = LogFollower(self.job.run_dir, nodes=nodes)
            self.log_task = asyncio.create_task(self.follow_logs(self.follower))

    async def forward(self, event: dict[str, Any]) -> None:
        await super().forward(event)
        payload = event["payload"]
        running = payload.get("type") == "status" and payload.get("status") == JobStatus.RUNNING
        if self.follower is not None and running:
            job = await _refreshed(self.job)
            self.follower.nodes = ranks_per_node(job.placement)

    async def disconnect(self, code: int) -> None:
        if self.log_task is not None:
            self.log_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.log_task
        await super().disconnect(code)

    async def follow_logs(self, follower: LogFollower) -> None:
        """Send new log lines until the socket closes or loses its right to the job."""
        while self.groups_joined:
            for chunk in await asyncio.to_thread(follower.poll):
                await self.send_json(chunk.message())
            await asyncio.sleep(LOG_POLL_S)

    async def resolve(self, user: Any) -> list[str] | None:
        self.job = await _visible_job(user, int(self.scope["url_route"]["kwargs"]["job_id"]))
        return None if self.job is None else [job_group(self.job.pk)]

    async def greeting(self) -> list[dict[str, Any]]:
        # Read again: the row loaded by resolve() predates the group join, and a transition
        # published in between would otherwise be lost (the socket showed a stale status).
        job = await _refreshed(self.job)
        return [status_message(job)]


class TenantConsumer(LiveConsumer):
    """``ws/tenants/<slug>/``: one tenant the user belongs to."""

    kind = "tenant"

    async def resolve(self, user: Any) -> list[str] | None:
        pk = await _visible_tenant_pk(user, self.scope["url_route"]["kwargs"]["slug"])
        return None if pk is None else [tenant_group(pk)]


class ClusterConsumer(LiveConsumer):
    """``ws/cluster/``: site admins get everything; members only their tenants' messages.

    Messages that name no tenant (cluster-wide figures) go to everyone who may look.
    """

    kind = "cluster"

    slugs: frozenset[str] | None = None  # None: no narrowing (site admin)

    async def resolve(self, user: Any) -> list[str] | None:
        self.slugs = await _visible_slugs(user)
        return [CLUSTER_GROUP]

    def allows(self, payload: dict[str, Any]) -> bool:
        if self.slugs is None:
            return True
        slug = payload.get("tenant") or (payload.get("data") or {}).get("tenant")
        return slug is None or slug in self.slugs


class AlarmsConsumer(LiveConsumer):
    """``ws/alarms/``: alarms of every tenant the user belongs to."""

    kind = "alarms"

    async def resolve(self, user: Any) -> list[str]:
        return [tenant_group(pk) for pk in await _visible_tenant_pks(user)]

    def allows(self, payload: dict[str, Any]) -> bool:
        return payload.get("type") in {"alarm", "alarm_ack"}


@database_sync_to_async
def _visible_job(user: Any, job_id: int) -> Any:
    return jobs_for(user).filter(pk=job_id).first()


@database_sync_to_async
def _refreshed(job: Any) -> Any:
    job.refresh_from_db()
    return job


@database_sync_to_async
def _visible_tenant_pk(user: Any, slug: str) -> int | None:
    return tenants_for(user).filter(slug=slug).values_list("pk", flat=True).first()


@database_sync_to_async
def _visible_tenant_pks(user: Any) -> list[int]:
    return list(tenants_for(user).values_list("pk", flat=True))


@database_sync_to_async
def _visible_slugs(user: Any) -> frozenset[str] | None:
    if getattr(user, "is_superuser", False):
        return None
    return frozenset(tenants_for(user).values_list("slug", flat=True))
