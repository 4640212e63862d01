"""Settle jobs whose supervisor vanished (worker killed, machine restarted)."""

from __future__ import annotations

import datetime as dt
import logging
import socket

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from controlplane.jobs import state
from controlplane.jobs.choices import JobStatus
from controlplane.jobs.models import Job
from controlplane.jobs.services import request_schedule
from workers.supervisor import process

log = logging.getLogger(__name__)


def reconcile_step() -> int:
    """Fail running jobs with a stale heartbeat; return how many were settled.

    A stale job's process group, if it is on this node and still alive, is killed first.
    """
    cutoff = timezone.now() - dt.timedelta(seconds=settings.SYNCLANE_HEARTBEAT_TIMEOUT_S)
    stale = Job.objects.filter(status__in=[JobStatus.RUNNING, JobStatus.RESTARTING]).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    settled = 0
    for job in stale:
        pgid = job.placement.get("pgid")
        if pgid and job.placement.get("node") == socket.gethostname():
            process.kill_tree(int(pgid))
        try:
            state.transition(job, JobStatus.FAILED, reason="supervisor lost (no heartbeat)")
            settled += 1
        except state.TransitionError:
            continue
    if settled:
        request_schedule()
    return settled
