"""Link probes: a latency / bandwidth / jitter matrix between every pair of ranks.

Every ``probe_every`` steps (between steps, on the session's main-thread group) each pair
(i, j), i < j, is probed in turn, the same order on every rank:

1. latency: ``PINGS`` round trips of a 4-byte tensor; latency = median RTT / 2, jitter = the
   RTTs' standard deviation / 2;
2. bandwidth: ``TRANSFERS`` times, i sends ``payload_bytes`` and j answers with 4 bytes (the
   fastest counts: on a busy host, scheduling only ever adds time); the sender's pacer
   charges the payload (the emulated link and the allocation apply to probes as to
   collectives, and so does the fault injector's delay), bandwidth = bits / (time - min RTT/2).

A pair whose latency or jitter is above ``slow_s`` is probed once more (the *re-issue*: the
initiator tells the answerer with a one-element flag, so both sides stay in step), and the
better of the two measurements counts: one blip does not mark a link degraded, a link that
is slow twice is. ``LinkSample.reissued`` says which pairs needed it.

The initiator fills cells (i, j) and (j, i); one SUM all-reduce gives every rank the matrix,
and the metrics rank sends one ``link`` message per pair.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from workers.runtime.faults import FaultSpec
from workers.runtime.reporter import Reporter
from workers.runtime.throttle import TokenBucket

PINGS = 5
TRANSFERS = 3


@dataclass(frozen=True, kw_only=True)
class LinkSample:
    src: int
    dst: int
    latency_s: float
    bandwidth_bps: float
    jitter_s: float
    reissued: bool = False  # slow at first, probed once more (see the module docstring)


def probe_links(
    *,
    group: dist.ProcessGroup,
    pacer: TokenBucket,
    rank: int,
    world_size: int,
    step: int,
    fault: FaultSpec | None = None,
    payload_bytes: int = 64 * 1024,
    slow_s: float | None = None,
) -> list[LinkSample]:
    """Probe every pair; collective over ``group`` (all ranks call it). Returns pairs i < j.

    ``slow_s``: latency or jitter above it makes the initiator probe the pair once more
    (None: never).
    """
    ranks = dist.get_process_group_ranks(group)
    cells = torch.zeros(world_size, world_size, 4, dtype=torch.float64)
    small = torch.zeros(1)
    payload = torch.zeros(max(1, payload_bytes // 4))
    # A blip fault delays a probe's first attempt only: its re-issue goes through.
    delay, retry_delay = fault.delays(rank, step) if fault is not None else (0.0, 0.0)
    for i in range(world_size):
        for j in range(i + 1, world_size):
            if rank == i:
                link = _Link(ranks[j], group, small, payload)
                cells[i, j] = cells[j, i] = torch.tensor(
                    link.initiate(pacer, delay, retry_delay, slow_s), dtype=torch.float64
                )
            elif rank == j:
                _Link(ranks[i], group, small, payload).answer(delay, retry_delay)
    dist.all_reduce(cells, group=group)
    return [
        LinkSample(
            src=i,
            dst=j,
            latency_s=float(cells[i, j, 0]),
            bandwidth_bps=float(cells[i, j, 1]),
            jitter_s=float(cells[i, j, 2]),
            reissued=bool(cells[i, j, 3]),
        )
        for i in range(world_size)
        for j in range(i + 1, world_size)
    ]


def report_links(
    reporter: Reporter, samples: list[LinkSample], *, step: int, threshold_s: float
) -> None:
    """Send one ``link`` message per pair; ``degraded`` when latency or jitter > threshold."""
    for s in samples:
        state = "degraded" if _slowness(s.latency_s, s.jitter_s) > threshold_s else "ok"
        reporter.link(
            src=s.src,
            dst=s.dst,
            step=step,
            latency_s=s.latency_s,
            bandwidth_bps=s.bandwidth_bps,
            jitter_s=s.jitter_s,
            state=state,
            reissued=s.reissued,
        )


class _Link:
    """One rank pair's probe, from either end (the same order of sends and receives)."""

    def __init__(
        self, peer: int, group: dist.ProcessGroup, small: torch.Tensor, payload: torch.Tensor
    ) -> None:
        self.peer, self.group, self.small, self.payload = peer, group, small, payload

    def initiate(
        self, pacer: TokenBucket, delay: float, retry_delay: float, slow_s: float | None
    ) -> list[float]:
        """Measure (and re-issue once if slow); return [latency, bandwidth, jitter, reissued]."""
        first = self._measure(pacer, delay)
        again = slow_s is not None and _slowness(first[0], first[2]) > slow_s
        dist.send(torch.tensor([1.0 if again else 0.0]), self.peer, group=self.group)
        if not again:
            return [*first, 0.0]
        second = self._measure(pacer, retry_delay)
        best = min(first, second, key=lambda m: _slowness(m[0], m[2]))
        return [*best, 1.0]

    def answer(self, delay: float, retry_delay: float) -> None:
        self._respond(delay)
        flag = torch.zeros(1)
        dist.recv(flag, self.peer, group=self.group)
        if flag.item():
            self._respond(retry_delay)

    def _measure(self, pacer: TokenBucket, delay: float) -> list[float]:
        peer, group, small, payload = self.peer, self.group, self.small, self.payload
        rtts = []
        for _ in range(PINGS):
            t0 = time.perf_counter()
            _delay(delay)
            dist.send(small, peer, group=group)
            dist.recv(small, peer, group=group)
            rtts.append(time.perf_counter() - t0)
        rtt = statistics.median(rtts)
        best = float("inf")
        for _ in range(TRANSFERS):  # the fastest of a few: scheduler noise only ever adds time
            t0 = time.perf_counter()
            _delay(delay)
            dist.send(payload, peer, group=group)
            pacer.acquire(payload.numel() * payload.element_size(), started=t0)
            dist.recv(small, peer, group=group)
            best = min(best, time.perf_counter() - t0 - min(rtts) / 2)  # min: noise only adds
        bandwidth = payload.numel() * payload.element_size() * 8 / max(1e-9, best)
        return [rtt / 2, bandwidth, statistics.pstdev(rtts) / 2]

    def _respond(self, delay: float) -> None:
        peer, group, small, payload = self.peer, self.group, self.small, self.payload
        for _ in range(PINGS):
            dist.recv(small, peer, group=group)
            _delay(delay)
            dist.send(small, peer, group=group)
        for _ in range(TRANSFERS):
            dist.recv(payload, peer, group=group)
            _delay(delay)
            dist.send(small, peer, group=group)


def _slowness(latency_s: float, jitter_s: float) -> float:
    """What a link's health is judged by (against the jitter threshold): the worse of the two."""
    return max(latency_s, jitter_s)


def _delay(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)
