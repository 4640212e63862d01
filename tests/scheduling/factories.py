"""Small builders so a test states only what matters to it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.scheduling import (
    Cluster,
    Decision,
    JobRequest,
    Options,
    QueuePolicy,
    RunningJob,
    Snapshot,
    TenantQuota,
    schedule,
)

GBIT = 1e9


def tenant(name: str, slots: int = 8, gbps: float = 10.0, **kw: Any) -> TenantQuota:
    """A tenant's quota; best-effort queue unless ``queue_policy`` says otherwise."""
    kw.setdefault("queue_policy", QueuePolicy.BEST_EFFORT_FIFO)
    return TenantQuota(name=name, nominal_slots=slots, nominal_bandwidth_bps=gbps * GBIT, **kw)


def job(job_id: str, tenant: str, slots: int = 1, submit: float = 0.0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, tenant=tenant, slots=slots, submit_time=submit, **kw)


def running(
    job_id: str, tenant: str, slots: int = 1, started: float = 0.0, **kw: Any
) -> RunningJob:
    return RunningJob(
        id=job_id, tenant=tenant, slots=slots, submit_time=started, started_at=started, **kw
    )


def decide(
    tenants: Sequence[TenantQuota],
    pending: Sequence[JobRequest] = (),
    running_jobs: Sequence[RunningJob] = (),
    *,
    slots: int = 64,
    fabric_gbps: float = 100.0,
    now: float = 100.0,
    options: Options | None = None,
) -> Decision:
    cluster = Cluster(slots=slots, fabric_bps=fabric_gbps * GBIT)
    snap = Snapshot(
        cluster=cluster,
        tenants=tenants,
        pending=pending,
        running=running_jobs,
        options=options or Options(),
    )
    return schedule(snap, now)


def admitted_ids(decision: Decision) -> list[str]:
    return [a.job_id for a in decision.admissions]


def apply(
    decision: Decision,
    pending: Sequence[JobRequest],
    holding: Sequence[RunningJob],
    now: float,
) -> tuple[list[JobRequest], list[RunningJob]]:
    """Do what the control plane does with a decision; return the next (pending, running)."""
    started = {a.job_id for a in decision.admissions}
    gone = {p.job_id for p in decision.preemptions}
    next_pending = [j for j in pending if j.id not in started]
    next_pending += [r.requeued() for r in holding if r.id in gone]
    next_running = [r for r in holding if r.id not in gone]
    next_running += [j.started(now) for j in pending if j.id in started]
    return next_pending, next_running
