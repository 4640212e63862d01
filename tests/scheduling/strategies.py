"""Hypothesis strategies: small clusters, tenants with cohorts and limits, and jobs."""

from __future__ import annotations

from hypothesis import strategies as st

from controlplane.scheduling import (
    Cluster,
    JobRequest,
    PriorityClass,
    QueuePolicy,
    TenantQuota,
)

GBIT = 1e9
NAMES = ("vision", "nlp", "speech", "rl")
PRIORITIES = [p.value for p in PriorityClass]


def gbit(max_halves: int) -> st.SearchStrategy[float]:
    """Whole and half Gbit/s, so that sums are exact."""
    return st.integers(0, max_halves).map(lambda h: h * GBIT / 2)


clusters = st.builds(Cluster, slots=st.integers(0, 32), fabric_bps=gbit(40))


@st.composite
def tenant_lists(draw: st.DrawFn) -> list[TenantQuota]:
    count = draw(st.integers(1, len(NAMES)))
    tenants = []
    for name in NAMES[:count]:
        tenants.append(
            TenantQuota(
                name=name,
                nominal_slots=draw(st.integers(0, 16)),
                nominal_bandwidth_bps=draw(gbit(20)),
                max_running_jobs=draw(st.none() | st.integers(0, 6)),
                weight=draw(st.sampled_from([1.0, 2.0, 3.0])),
                cohort=draw(st.sampled_from([None, "lab", "lab", "ops"])),
                borrowing_limit_slots=draw(st.none() | st.integers(0, 8)),
                lending_limit_slots=draw(st.none() | st.integers(0, 8)),
                borrowing_limit_bps=draw(st.none() | gbit(10)),
                lending_limit_bps=draw(st.none() | gbit(10)),
                queue_policy=draw(st.sampled_from(list(QueuePolicy))),
            )
        )
    return tenants


@st.composite
def job_lists(
    draw: st.DrawFn, tenants: list[TenantQuota], prefix: str, max_size: int = 14
) -> list[JobRequest]:
    names = [t.name for t in tenants] + ["ghost"]
    jobs = []
    for i in range(draw(st.integers(0, max_size))):
        floor = draw(st.sampled_from([0.0, 0.0, 0.5 * GBIT, GBIT, 3 * GBIT]))
        extra = draw(st.none() | gbit(12))
        has_deadline = draw(st.booleans())
        jobs.append(
            JobRequest(
                id=f"{prefix}{i}",
                tenant=draw(st.sampled_from(names)),
                slots=draw(st.integers(1, 8)),
                submit_time=float(draw(st.integers(0, 5))),
                priority=draw(st.sampled_from(PRIORITIES)),
                bandwidth_floor_bps=floor,
                bandwidth_ceiling_bps=None if extra is None else floor + extra,
                deadline=float(draw(st.integers(0, 300))) if has_deadline else None,
                remaining_steps=float(draw(st.integers(0, 2000))),
                steps_per_second=draw(st.none() | st.sampled_from([0.5, 2.0, 10.0])),
            )
        )
    return jobs
