"""Tenants' queues, bucketed by equivalence class, so a decision never walks the backlog.

Jobs of one tenant with the same priority, slots, floor and node selector are *equivalent*: they are judged by
the same quota checks and have the same preemption rights (as Kueue's scheduling-equivalence
hash groups workloads). When the first of them does not fit, none of the others would, so a
decision looks at the head of each class, not at every job: its cost depends on the number of
classes, not on the length of the queue.

A queue's order is priority (highest first), then submit time, then id; the next job of a
tenant is the head, in that order, of one of its classes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from .types import ClassKey, JobRequest


def queue_order(job: JobRequest) -> tuple[int, float, str]:
    """Sort key of a tenant's queue: priority (highest first), then submit time, then id."""
    return (-job.priority, job.submit_time, job.id)


def class_of(job: JobRequest) -> ClassKey:
    selector = job.node_selector  # (inlined selector_key: this runs on every push and turn)
    key = tuple(sorted(selector.items())) if selector else ()
    return (job.priority, job.slots, job.bandwidth_floor_bps, key)


class TenantQueue:
    """One tenant's waiting jobs, as a heap per equivalence class.

    Removal is lazy: a removed job stays in its heap until it reaches the top, where
    :meth:`head` drops it. ``len()`` counts live jobs only.
    """

    __slots__ = ("classes", "live", "seq")

    def __init__(self) -> None:
        # (submit time, id, push count, job): the count keeps a requeued job's new entry from
        # being compared with its stale one.
        self.classes: dict[ClassKey, list[tuple[float, str, int, JobRequest]]] = {}
        self.live: dict[str, JobRequest] = {}
        self.seq = itertools.count()

    def __len__(self) -> int:
        return len(self.live)

    def push(self, job: JobRequest) -> None:
        self.live[job.id] = job
        heap = self.classes.setdefault(class_of(job), [])
        heapq.heappush(heap, (job.submit_time, job.id, next(self.seq), job))

    def discard(self, job_id: str) -> JobRequest | None:
        """Remove a job (lazily); return it, or None if it is not queued here."""
        return self.live.pop(job_id, None)

    def head(self, key: ClassKey) -> JobRequest | None:
        """Return the first live job of class ``key`` (None if the class is empty)."""
        heap = self.classes.get(key)
        while heap:
            job = heap[0][3]
            if self.live.get(job.id) is job:
                return job
            heapq.heappop(heap)
        if heap is not None:
            del self.classes[key]
        return None

    def class_heads(self) -> list[tuple[tuple[int, float, str], ClassKey]]:
        """A heap of (queue order of its head, class) over the non-empty classes."""
        heads = []
        for key in list(self.classes):
            job = self.head(key)
            if job is not None:
                heads.append((queue_order(job), key))
        heapq.heapify(heads)
        return heads

    def members(self, key: ClassKey) -> Iterator[JobRequest]:
        """Every live job of class ``key``, in no particular order."""
        live = self.live
        for _, job_id, _, job in self.classes.get(key, ()):
            if live.get(job_id) is job:
                yield job

    def jobs(self) -> Iterator[JobRequest]:
        """Every live job, in no particular order."""
        return iter(self.live.values())
