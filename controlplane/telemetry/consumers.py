"""Websocket consumers: authenticate, check tenancy, join a group, forward.

They never write to the database.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from controlplane.jobs.access import jobs_for
from controlplane.jobs.models import Job
from controlplane.jobs.state import status_message
from controlplane.telemetry.groups import job_group

# Close codes (4000-4999 are free for applications).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class JobConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """``ws/jobs/<id>/``: a job's ``status`` and ``metrics`` (and later ``link``, ``alarm``)."""

    group: str | None = None

    async def connect(self) -> None:
        # Refusals accept first, then close with a code the page can act on (a refused
        # handshake would only show the browser a bare 403).
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        job = await _visible_job(user, int(self.scope["url_route"]["kwargs"]["job_id"]))
        if job is None:
            # Same answer for "missing" and "another tenant's": existence is not confirmed.
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = job_group(job.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(status_message(job))

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # The socket is one-way (server -> browser); anything sent is ignored.
        return None

    async def forward(self, event: dict[str, Any]) -> None:
        await self.send_json(event["payload"])


@database_sync_to_async
def _visible_job(user: Any, job_id: int) -> Job | None:
    return jobs_for(user).filter(pk=job_id).first()
