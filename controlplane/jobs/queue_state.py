"""The scheduling pass's queues, kept between passes by each worker process.

A pass from scratch reads every queued job (``adapters.snapshot``): 709 ms at 20,000 queued
jobs, three quarters of it reading. A worker process instead keeps the core's ``Queues`` from
its last pass and brings it up to date from the change feed (``QueueChange``, written by
database triggers): it reads again only the jobs named there since its last pass. The core
then looks only at the tenants those changes may have unblocked. The running jobs (at most
the cluster's slots), the quotas and the cluster are read on every pass, as before.

    state = queue_state.current()
    rebuilt = state.prepare(tenants, now)   # inside the pass's transaction
    decision = core.decide(state.queues, ...)
    ...                                     # apply it
    transaction.on_commit(state.committed)  # built on only once the pass commits

The queues are read from scratch (a rebuild, which also rewrites every waiting job's reason):
- on the process's first pass, and every SYNCLANE_SCHEDULE_REBUILD_S as a safety net;
- when a tenant, a quota, a queue policy or a scheduler option changed;
- when the newest feed entry it read is gone (the database was restored, flushed or rolled
  back under it), or more than CATCH_UP_MAX jobs changed since its last pass;
- after a pass that did not commit (its decision changed the queues, not the database).

Reading the feed: on SQLite one writer at a time commits, so entries commit in id order and
the pass reads those after the last id it read. On PostgreSQL ids are taken at insert and may
commit out of order, so each entry carries its transaction id, and a pass reads every entry
of a transaction that was still running at its last read (the snapshot's xmin), skipping the
entries it has already read.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping

from django.conf import settings
from django.db import connection

from controlplane import scheduling as core
from controlplane.jobs import adapters
from controlplane.jobs.models import Job, QueueChange
from controlplane.scheduling.backlog import TenantQueue, class_of
from controlplane.scheduling.types import ClassKey, Reason
from controlplane.tenancy.models import Tenant

# More jobs changed than this since a process's last pass: read the queue again instead.
CATCH_UP_MAX = 5_000
# Feed entries older than this are deleted at a rebuild (every process has read them).
PRUNE_AFTER_S = 600.0


class QueueState:
    """One process's queues between passes; see the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one pass at a time in this process
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next pass reads the queue from scratch."""
        self.queues: core.Queues | None = None
        self.quotas: list[core.TenantQuota] = []
        self.options: core.Options | None = None
        self.anchor: tuple[int, dt.datetime] | None = None  # newest feed entry read
        self.xmin = 0  # PostgreSQL: entries of transactions from this one on are read again
        self.seen: set[int] = set()  # PostgreSQL: entries read already among those
        self.tenant_of: dict[int, str] = {}  # queued job -> its tenant
        self.written: dict[int, tuple[str, str]] = {}  # queued job -> stored (reason, code)
        # (tenant, equivalence class) -> the reason every job of the class was last given
        self.class_written: dict[tuple[str, ClassKey], Reason] = {}
        self.fresh: list[int] = []  # jobs read anew this pass
        self.heads: dict[str, str | None] = {}  # tenant -> the head blocking its queue
        self.built_at = -math.inf
        self.valid = False  # the last pass committed: the queues match the database

    # --- a pass --------------------------------------------------------------------------

    def prepare(self, tenants: list[Tenant], now: dt.datetime) -> bool:
        """Bring the queues up to date with the database (inside the pass's transaction,
        tenants locked). Returns True if they were read from scratch."""
        quotas, options = adapters.tenant_quotas(tenants), adapters.options()
        changed = None
        if (
            self.valid
            and self.queues is not None
            and quotas == self.quotas
            and options == self.options
            and time.monotonic() - self.built_at < settings.SYNCLANE_SCHEDULE_REBUILD_S
            and self._anchor_holds()
        ):
            changed = self._read_feed()
        self.valid = False
        if changed is None or len(changed) > CATCH_UP_MAX:
            self._rebuild(tenants, quotas, options, now)
            return True
        assert self.queues is not None
        self._catch_up(changed, tenants, now.timestamp())
        # Read after the feed: a job requeued in between is then in neither (until the next
        # pass), never in both.
        running = adapters.holding(tenants)
        self._hold(running, now.timestamp())
        cluster = adapters.cluster(running, now)
        if cluster != self.queues.ledger.cluster:
            self.queues.resize(cluster)
        return False

    def applied(self, decision: core.Decision) -> None:
        """The pass applied ``decision``: admitted jobs left the queue; victims are not back in
        it until their supervisor requeues them (the feed then says so)."""
        assert self.queues is not None
        for admission in decision.admissions:  # (the decision took them off the queues)
            self.tenant_of.pop(int(admission.job_id), None)
            self.written.pop(int(admission.job_id), None)
        for preemption in decision.preemptions:
            self.queues.withdraw(preemption.job_id, preemption.tenant)

    def remember(self, reasons: Mapping[str, core.WaitReasons]) -> None:
        """A pass from scratch wrote every waiting job's reason: these, by class."""
        assert self.queues is not None
        for tenant, why in reasons.items():
            queue = self.queues.queues.get(tenant)
            for key in queue.classes if queue else ():
                self.class_written[(tenant, key)] = why.of_class(key)
            self.heads[tenant] = why.blocked

    def explained(self, reasons: Mapping[str, core.WaitReasons]) -> Iterator[tuple[int, str, str]]:
        """(job, reason, code) for each waiting job whose reason may have changed in a pass
        that looked at ``reasons``' tenants: every job of a class whose reason changed, and
        the jobs whose reason is their own (a blocking head, a job in back-off, a job read
        anew this pass). A class whose reason did not change costs one comparison."""
        assert self.queues is not None
        for tenant, why in reasons.items():
            queue = self.queues.queues.get(tenant)
            if queue is not None:
                yield from self._classes_changed(queue, why)
            # The head blocking the queue now, and the one before (its reason is its own).
            for job_id in {why.blocked, self.heads.get(tenant)} - {None}:
                if (job := self.queues.pending(str(job_id), tenant)) is not None:
                    yield _stored(job.id, why.of(job.id, class_of(job)))
            self.heads[tenant] = why.blocked
            for job_id, reason in why.backoff.items():
                yield _stored(job_id, reason)
        for pk in self.fresh:
            owner = self.tenant_of.get(pk)
            told = reasons.get(owner) if owner is not None else None
            job = self.queues.pending(str(pk), owner) if told and owner else None
            if told is not None and job is not None:
                yield _stored(job.id, told.of(job.id, class_of(job)))

    def _classes_changed(
        self, queue: TenantQueue, why: core.WaitReasons
    ) -> Iterator[tuple[int, str, str]]:
        """Every job of each class of ``queue`` whose reason changed since it was written."""
        for key in list(queue.classes):
            reason = why.of_class(key)
            if self.class_written.get((why.tenant, key)) != reason:
                self.class_written[(why.tenant, key)] = reason
                for job in queue.members(key):
                    yield _stored(job.id, why.of(job.id, key))

    def committed(self) -> None:
        """The pass's transaction committed: the queues match the database again."""
        self.valid = True

    # --- reading ----------------------------------------------------------------------------

    def _rebuild(
        self,
        tenants: list[Tenant],
        quotas: list[core.TenantQuota],
        options: core.Options,
        now: dt.datetime,
    ) -> None:
        self.reset()
        # The feed's position first: what commits after it is read again at the next pass.
        self._mark(now)
        pending = adapters.queued(tenants)
        running = adapters.holding(tenants)  # after: a job requeued in between is in neither
        snapshot = core.Snapshot(
            cluster=adapters.cluster(running, now),
            tenants=quotas,
            pending=[adapters.job_request(j) for j in pending],
            running=[adapters.running_job(j) for j in running],
            options=options,
        )
        self.queues = core.Queues.of(snapshot, now.timestamp())
        self.quotas, self.options = quotas, options
        for job, request in zip(pending, snapshot.pending, strict=True):
            self.tenant_of[job.pk] = request.tenant
            self.written[job.pk] = (job.status_reason, job.wait_code)
        self.built_at = time.monotonic()

    def _mark(self, now: dt.datetime) -> None:
        """Take the feed's position now, with an entry of its own as the anchor, and prune."""
        if connection.vendor == "postgresql":
            self.xmin = min(_transaction_ids())  # this pass's own entries are read next time
        marker = QueueChange.objects.create(job_id=0)
        marker.refresh_from_db(fields=["at"])
        self.anchor = (marker.pk, marker.at)
        cutoff = now - dt.timedelta(
            seconds=max(PRUNE_AFTER_S, 2 * settings.SYNCLANE_SCHEDULE_REBUILD_S)
        )
        QueueChange.objects.filter(at__lt=cutoff, pk__lt=marker.pk).delete()

    def _anchor_holds(self) -> bool:
        if self.anchor is None:
            return False
        pk, at = self.anchor
        # (Compared here, not in SQL: SQLite stores the trigger's time as text.)
        return QueueChange.objects.filter(pk=pk).values_list("at", flat=True).first() == at

    def _read_feed(self) -> list[int] | None:
        """The ids of the jobs changed since the last read, in feed order (None: too many to
        catch up with; read everything again)."""
        assert self.anchor is not None
        entries = QueueChange.objects.order_by("pk").values_list("pk", "job_id", "xid", "at")
        if connection.vendor == "postgresql":
            xmin, own = _transaction_ids()
            rows = list(entries.filter(xid__gte=self.xmin)[: CATCH_UP_MAX + 1])
            new = [r for r in rows if r[0] not in self.seen]
            # Read again next time: entries of transactions running now, and this pass's own.
            self.xmin = min(xmin, own)
            self.seen = {r[0] for r in rows if (r[2] or 0) >= self.xmin}
        else:
            new = list(entries.filter(pk__gt=self.anchor[0])[: CATCH_UP_MAX + 1])
        if len(new) > CATCH_UP_MAX:
            return None
        if new:
            newest = max(new)
            self.anchor = (newest[0], newest[3])
        return list(dict.fromkeys(job_id for _, job_id, _, _ in new if job_id))

    def _catch_up(self, changed: list[int], tenants: list[Tenant], now: float) -> None:
        """Each changed job leaves the queues, and comes back as it is now if still queued."""
        assert self.queues is not None
        self.fresh = changed
        rows = {job.pk: job for job in adapters.queued(tenants, changed)}
        for pk in changed:
            self._forget(pk)
            job = rows.get(pk)
            if job is None:
                continue
            request = adapters.job_request(job)
            self.queues.submit(request, now)
            self.queues.touch(request.tenant)  # explained this pass, even if in back-off
            self.tenant_of[pk] = request.tenant
            self.written[pk] = (job.status_reason, job.wait_code)

    def _forget(self, pk: int) -> None:
        assert self.queues is not None
        tenant = self.tenant_of.pop(pk, None)
        self.written.pop(pk, None)
        if tenant is not None:
            self.queues.withdraw(str(pk), tenant)

    def _hold(self, running: Iterable[Job], now: float) -> None:
        """Count the jobs holding slots now: those that ended or were asked to stop release
        theirs; those admitted elsewhere (another process's pass) take theirs."""
        assert self.queues is not None
        queues = self.queues
        fresh = {str(job.pk): adapters.running_job(job) for job in running}
        for job_id in [j for j in queues.running if j not in fresh]:
            queues.release(job_id)
        for job_id, job in fresh.items():
            old = queues.running.get(job_id)
            if old is not None and _holds_same(old, job):
                queues.running[job_id] = job  # its progress, rate and checkpoint age are new
                continue
            if old is not None:
                queues.release(job_id)
            queues.hold(job)


def _stored(job_id: str, reason: Reason) -> tuple[int, str, str]:
    """A job's reason as the job row stores it."""
    code, detail = reason
    return int(job_id), f"waiting: {detail}", str(code)


def _holds_same(a: core.RunningJob, b: core.RunningJob) -> bool:
    """Whether the two count the same in the ledger (tenant, slots, floor, nodes)."""
    return (
        a.tenant == b.tenant
        and a.slots == b.slots
        and a.bandwidth_floor_bps == b.bandwidth_floor_bps
        and a.placement == b.placement
    )


def _transaction_ids() -> tuple[int, int]:
    """PostgreSQL: (the oldest transaction still running, this transaction's id)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint,"
            " pg_current_xact_id()::text::bigint"
        )
        xmin, own = cursor.fetchone()
    return int(xmin), int(own)


_STATE = QueueState()


def current() -> QueueState:
    """This process's queue state."""
    return _STATE
