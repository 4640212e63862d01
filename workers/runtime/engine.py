"""The communication engine: every gradient collective of a wrapped model runs here.

One background thread per rank owns a process group of its own (on gloo, a thread
that issues collectives must not share a group with the main thread, whose collectives it
could interleave with). A DDP comm hook only enqueues its bucket and returns a Future that
this thread completes later, so the autograd thread never blocks and callbacks never wait.

Per transfer the thread
  1. fuses small buckets and splits large ones into chunks of ``chunk_bytes`` (fusion waits
     for the next bucket until ``fuse_bytes`` are pending or DDP says the bucket is the last
     one, so a bucket of useful size leaves while backward computes the next; the rule
     depends only on bucket sizes and ``fuse_bytes``, which adaptive sets between steps
     from agreed figures, so every rank issues the same collectives),
  2. applies the fault injector's extra delay when a fault is active on this rank,
  3. all-reduces the chunk (SUM; callers pre-divide, gloo has no AVG); while the link is
     degraded, a chunk that is late is re-issued once on a spare group (``reissue.py``),
  4. paces: sleeps until a link of the throttle's rate would have delivered the wire bytes.

Blockwise int8 transfers (``submit_quantized``: adaptive's critical gradients where its
``compress`` setting sends them as int8) cannot be summed by an all-reduce. They go unfused, in chunks of whole
rows, as a reduce-scatter then an all-gather: an all-to-all gives each rank one share of the
rows from every rank, which it decodes, sums in fp32 and re-quantizes (with error feedback
of its own), and an all-gather gives every rank every summed share. Every rank decodes the
same gathered codes, so all get the same values; the wire bytes are a ring all-reduce's of
the packed rows (half of bf16's).

``chunk_bytes`` changes only between steps, from values every rank agreed on (see
``health.LinkHealth``), never from a rank's local timing mid-step: ranks disagreeing on a
chunk size would issue mismatched collectives and hang. Each transfer keeps the chunk size
and re-issue setting of the moment it was submitted, so one still queued at a change (an
average sent while the next step computes) is cut and sent alike on every rank.

A second engine can run as a *background lane* (``yield_to=foreground.wait_until_idle``):
on a group and thread of its own, it carries traffic that is not on the step's critical path (the
adaptive strategy's periodic parameter averages) in small chunks, and before each chunk
waits until the foreground engine has nothing queued and the link is idle. Both pace
through the same token bucket, so the link stays one serial resource and a step's
gradients wait behind at most one background chunk. Waiting changes only *when* a rank
joins a background collective, never which ones or in what order.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from workers.runtime.compress import PACKED_ROW, QUANT_BLOCK, pack_int8, unpack_int8
from workers.runtime.faults import FaultSpec
from workers.runtime.reissue import Reissuer
from workers.runtime.stats import CommStats, ring_allreduce_wire_bytes
from workers.runtime.throttle import TokenBucket

MIN_CHUNK_BYTES = 64 * 1024
MAX_CHUNK_BYTES = 8 * 1024 * 1024
# Pending buckets leave once this many bytes are pending (fusion of small buckets only).
# Small, so a step's first critical slices leave early in backward. (16 KB instead of 32 KB,
# with the lane's 64 KB chunks below: +12% / +7% samples/s for adaptive at 100 Mbit/s with
# 2 / 4 ranks in an A/B of single runs; the full bench_sync run confirmed it at 4 ranks only.)
FUSE_BYTES = 16 * 1024
# Background-lane chunks: a gradient waits behind at most one (64 KB: ~5 ms at 100 Mbit/s
# with 2 ranks). Smaller chunks cost more: each is a collective, and each makes the lane's
# thread take the GIL from the training thread (16 KB chunks slowed forward by ~2-4 ms).
# This is the lane's size where the link rate is unknown; where it is known, a transfer
# names its own chunk size (``submit``'s ``chunk_bytes``; adaptive: ``BACKGROUND_CHUNK_S``
# of link time), so on a fast link an average is not cut into chunks of a fraction of a ms.
BACKGROUND_CHUNK_BYTES = 64 * 1024


@dataclass
class _Pace:
    done: torch.futures.Future[torch.Tensor]  # a torch hook's Future; the engine waits for it
    out: torch.futures.Future[torch.Tensor]
    started: float
    payload_bytes: int
    wire_bytes: int


@dataclass
class _Call:
    """A torch hook to run on the engine's thread, one at a time, then pace (``run_serially``)."""

    call: Callable[[], torch.futures.Future[torch.Tensor]]
    out: torch.futures.Future[torch.Tensor]
    started: float
    payload_bytes: int
    wire_bytes: int


@dataclass
class _Job:
    tensor: torch.Tensor
    future: torch.futures.Future[torch.Tensor]
    flush: bool  # last bucket of the step (or a standalone collective): send what is pending
    # The engine's settings when the transfer was submitted. LinkHealth changes them between
    # steps on the main thread; a transfer queued before a change and reached by the engine
    # thread after it must still be cut and sent alike on every rank.
    engine_chunk_bytes: int
    reissue_after_s: float | None = None  # None: re-issue off
    submitted: float = field(default_factory=time.perf_counter)
    chunk_bytes: int | None = None  # this transfer's own chunk size (None: engine_chunk_bytes)
    quantized: Hashable | None = None  # packed int8 rows: the key of their shard residuals


class CommEngine:
    """Background all-reduce with fusion, chunking, fault injection and pacing."""

    def __init__(
        self,
        *,
        group: dist.ProcessGroup,
        pacer: TokenBucket,
        stats: CommStats,
        rank: int,
        chunk_bytes: int = 1024 * 1024,
        fault: FaultSpec | None = None,
        step_fn: Callable[[], int] = lambda: 0,
        yield_to: Callable[[], None] | None = None,
        fuse_bytes: int = FUSE_BYTES,
        spare_group: dist.ProcessGroup | None = None,
    ) -> None:
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.pacer = pacer
        self.stats = stats
        self.rank = rank
        self.chunk_bytes = chunk_bytes
        self.initial_chunk_bytes = chunk_bytes
        self.fuse_bytes = fuse_bytes
        # Whole buckets (``full``): each submission is one collective, unfused and unsplit,
        # while the chunk size is at its initial value (a degraded link shrinks it).
        self.whole_buckets = False
        self.fault = fault
        self._step_fn = step_fn
        self._yield_to = yield_to
        # Re-issue of slow chunks (reissue.py): possible with a spare group, on for the
        # transfers submitted while reissue_after_s is set (LinkHealth sets it between
        # steps, on every rank alike; each transfer keeps the setting it was submitted with).
        self.reissuer = (
            Reissuer(group=group, spare_group=spare_group) if spare_group is not None else None
        )
        self.reissue_after_s: float | None = None
        self._outstanding = 0  # submitted transfers whose Future is not completed yet
        self._queue: queue.SimpleQueue[_Job | _Pace | _Call | None] = queue.SimpleQueue()
        self._pending: list[_Job] = []
        # Per-step link figures (read and reset by pop_link_stats on the main thread).
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when _outstanding drops
        self._max_wait_in_collective = 0.0
        self._chunk_times: list[float] = []
        self._last_flush_submitted: float | None = None
        self._reissued = 0
        # Residuals of re-quantizing this rank's summed share of int8 transfers, per key and row.
        self._shard_residuals: dict[Hashable, torch.Tensor] = {}
        self._thread = threading.Thread(target=self._run, name="synclane-comm", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- API

    def submit(
        self, tensor: torch.Tensor, *, flush: bool, chunk_bytes: int | None = None
    ) -> torch.futures.Future[torch.Tensor]:
        """Queue ``tensor`` for an in-place SUM all-reduce; the Future yields the tensor.

        ``chunk_bytes`` cuts this transfer (and what it is fused with) into chunks of that
        size rather than the engine's; every rank must pass the same value for it.
        """
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        with self._lock:
            self._outstanding += 1
        job = _Job(
            tensor,
            fut,
            flush,
            chunk_bytes=chunk_bytes,
            reissue_after_s=self.reissue_after_s,
            engine_chunk_bytes=self.chunk_bytes,
        )
        self._queue.put(job)
        return fut

    def submit_quantized(
        self, packed: torch.Tensor, *, key: Hashable, flush: bool
    ) -> torch.futures.Future[torch.Tensor]:
        """Queue packed int8 rows (``compress.Int8Feedback``; a multiple of the world size of
        rows, each rank's values pre-divided) for a sum; the Future yields the same tensor,
        holding the packed rows of the sum. ``key`` names the transfer from step to step (its
        re-quantization residuals)."""
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        with self._lock:
            self._outstanding += 1
        job = _Job(packed, fut, flush, quantized=key, engine_chunk_bytes=self.chunk_bytes)
        self._queue.put(job)
        return fut

    def wait_until_idle(self) -> None:
        """Block until nothing is queued or running here and the link's paced slot ended."""
        with self._idle:
            while True:
                if self._outstanding:
                    self._idle.wait()
                    continue
                remaining = self.pacer.busy_for()
                if remaining <= 0:
                    return
                self._idle.wait(remaining)

    def _done(self, count: int) -> None:
        with self._idle:
            self._outstanding -= count
            self._idle.notify_all()

    def pace_after(
        self,
        fut: torch.futures.Future[torch.Tensor],
        *,
        started: float,
        payload_bytes: int,
        wire_bytes: int,
    ) -> torch.futures.Future[torch.Tensor]:
        """Return a Future completed once ``fut`` is done *and* its wire bytes are paced.

        For torch's own hooks, whose collectives we do not issue: the engine's thread waits
        for ``fut`` and does the sleeping. No Python callback goes on ``fut`` with ``then()``:
        gloo completes it on one of its own threads, which must then take the GIL to run and
        to release the callback; at interpreter exit that thread can find the interpreter
        finalizing and end the process with "terminate called without an active exception".
        """
        out: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        with self._lock:
            self._outstanding += 1
        self._queue.put(_Pace(fut, out, started, payload_bytes, wire_bytes))
        return out

    def run_serially(
        self,
        call: Callable[[], torch.futures.Future[torch.Tensor]],
        *,
        started: float,
        payload_bytes: int,
        wire_bytes: int,
    ) -> torch.futures.Future[torch.Tensor]:
        """Run ``call`` (a torch hook on one bucket) on the engine's thread, after every
        earlier submission has finished, wait for its Future, pace its bytes, and return a
        Future of its result.

        For hooks that issue further collectives from their Future's callbacks (torch's
        PowerSGD issues the P and Q all-reduces there, and waits inside them): two buckets'
        chains in flight at once issue those collectives in an order that depends on thread
        timing, so ranks disagree on the order (gloo: a collective mismatch or a hang), and
        their waiting callbacks can occupy every gloo worker thread (a hang even on one
        rank). One chain at a time keeps every rank's order the buckets' order.
        """
        out: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        with self._lock:
            self._outstanding += 1
        self._queue.put(_Call(call, out, started, payload_bytes, wire_bytes))
        return out

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """SUM-all-reduce ``tensor`` in place on the engine's thread and wait (main thread only)."""
        return self.submit(tensor, flush=True).wait()

    def set_chunk_bytes(self, nbytes: int) -> None:
        self.chunk_bytes = int(min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, nbytes)))

    def pop_link_stats(self) -> dict[str, float]:
        """Return and reset this step's link figures.

        ``sync_delay_s``: longest time one collective spent inside the all-reduce call (on an
        unthrottled transport that is mostly waiting for a late peer: pacing happens after the
        call); ``chunk_jitter_s``: std of per-chunk durations;
        ``last_submit``: perf_counter time the step's final bucket was handed over;
        ``reissued``: chunks whose first attempt was late and went again (same on every rank).
        """
        with self._lock:
            reissued, self._reissued = self._reissued, 0
            times, self._chunk_times = self._chunk_times, []
            longest, self._max_wait_in_collective = self._max_wait_in_collective, 0.0
            last, self._last_flush_submitted = self._last_flush_submitted, None
        mean = sum(times) / len(times) if times else 0.0
        jitter = math.sqrt(sum((t - mean) ** 2 for t in times) / len(times)) if times else 0.0
        return {
            "sync_delay_s": longest,
            "chunk_jitter_s": jitter,
            "last_submit": last if last is not None else 0.0,
            "reissued": float(reissued),
        }

    def close(self) -> bool:
        """Let queued work finish, stop the thread; return whether it stopped (30 s at most)."""
        self._queue.put(None)
        self._thread.join(timeout=30)
        if self.reissuer is not None:
            self.reissuer.close()
        return not self._thread.is_alive()

    # ---------------------------------------------------------------- thread

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            if isinstance(job, _Pace):
                self._finish_paced(job)
                continue
            if isinstance(job, _Call):
                self._run_call(job)
                continue
            if job.quantized is not None:
                # Unfused: what is pending goes first, then these rows on their own.
                if self._pending:
                    batch, self._pending = self._pending, []
                    self._finish(batch, self._reduce)
                self._record_flush(job)
                self._finish([job], self._reduce_quantized)
                continue
            self._pending.append(job)
            size = sum(j.tensor.numel() * j.tensor.element_size() for j in self._pending)
            limit = min(self.fuse_bytes, job.engine_chunk_bytes)
            if job.flush or self.whole_buckets or size >= limit:
                self._record_flush(job)
                batch, self._pending = self._pending, []
                self._finish(batch, self._reduce)

    def _record_flush(self, job: _Job) -> None:
        if job.flush:
            with self._lock:
                self._last_flush_submitted = job.submitted

    def _finish(self, batch: list[_Job], reduce: Callable[[list[_Job]], None]) -> None:
        """Reduce ``batch`` and complete its Futures (an error surfaces in DDP's backward)."""
        try:
            reduce(batch)
        except Exception as exc:
            for j in batch:
                j.future.set_exception(exc)  # type: ignore[arg-type]  # torch stub is wrong
        else:
            for j in batch:
                j.future.set_result(j.tensor)
        finally:
            self._done(len(batch))

    def _run_call(self, job: _Call) -> None:
        try:
            done = job.call()
            done.wait()
        except Exception as exc:
            job.out.set_exception(exc)  # type: ignore[arg-type]  # torch stub is wrong
            self._done(1)
            return
        self._finish_paced(_Pace(done, job.out, job.started, job.payload_bytes, job.wire_bytes))

    def _finish_paced(self, job: _Pace) -> None:
        try:
            self._finish_paced_job(job)
        finally:
            self._done(1)

    def _finish_paced_job(self, job: _Pace) -> None:
        try:
            value: object = job.done.wait()
        except Exception as exc:
            job.out.set_exception(exc)  # type: ignore[arg-type]  # torch stub is wrong
            return
        self.pacer.acquire(job.wire_bytes, started=job.started)
        self.stats.completed(
            job.started, payload_bytes=job.payload_bytes, wire_bytes=job.wire_bytes
        )
        with self._lock:
            self._chunk_times.append(time.perf_counter() - job.started)
        tensor = value[0] if isinstance(value, list) else value
        assert isinstance(tensor, torch.Tensor)
        job.out.set_result(tensor)

    def _reduce(self, batch: list[_Job]) -> None:
        tensors = [j.tensor for j in batch]
        flat = tensors[0] if len(tensors) == 1 else torch.cat([t.reshape(-1) for t in tensors])
        flat_view = flat.reshape(-1)
        # The flushing job's settings (see _Job): the same on every rank.
        last = batch[-1]
        engine_chunk_bytes = last.engine_chunk_bytes
        chunk_bytes = min(
            (j.chunk_bytes for j in batch if j.chunk_bytes), default=engine_chunk_bytes
        )
        per_chunk = max(1, chunk_bytes // flat_view.element_size())
        if self.whole_buckets and engine_chunk_bytes >= self.initial_chunk_bytes:
            per_chunk = max(1, flat_view.numel())
        for start in range(0, flat_view.numel(), per_chunk):  # no chunk at all when empty
            self._reduce_chunk(flat_view[start : start + per_chunk], last.reissue_after_s)
        if len(tensors) > 1:
            offset = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat_view[offset : offset + n].view_as(t))
                offset += n

    def _reduce_chunk(self, chunk: torch.Tensor, after_s: float | None) -> None:
        if self._yield_to is not None:
            self._yield_to()
        fault = self.fault
        first_delay, retry_delay = (0.0, 0.0)
        if fault is not None:
            first_delay, retry_delay = fault.delays(self.rank, self._step_fn())
        payload = chunk.numel() * chunk.element_size()
        wire = ring_allreduce_wire_bytes(payload, self.world_size)
        reissuer = self.reissuer
        retried: float | None = None
        if reissuer is not None and after_s is not None and not chunk.is_cuda:
            started = self.stats.launched()
            retried = reissuer.reduce(
                chunk, after_s=after_s, first_delay_s=first_delay, retry_delay_s=retry_delay
            )
        else:
            if reissuer is not None:
                reissuer.drain()  # first attempts of a re-issue period go first on the group
            if first_delay > 0:
                time.sleep(first_delay)
            started = self.stats.launched()
            self._all_reduce(chunk)
        counted_from = started if retried is None else retried  # the attempt whose result counts
        self._account(
            started, counted_from, payload=payload, wire=wire, reissued=retried is not None
        )

    def _account(
        self, started: float, counted_from: float, *, payload: int, wire: int, reissued: bool
    ) -> None:
        """Pace a finished chunk's wire bytes and record its figures."""
        inside = time.perf_counter() - counted_from
        self.pacer.acquire(wire, started=counted_from)
        self.stats.completed(started, payload_bytes=payload, wire_bytes=wire)
        with self._lock:
            self._max_wait_in_collective = max(self._max_wait_in_collective, inside)
            self._chunk_times.append(time.perf_counter() - started)
            if reissued:
                self._reissued += 1

    def _reduce_quantized(self, batch: list[_Job]) -> None:
        """Sum one job's packed int8 rows across ranks, in place, chunk by chunk (whole rows,
        a multiple of the world size of them; see the module docstring)."""
        (job,) = batch
        packed, n = job.tensor, self.world_size
        per_chunk = max(n, job.engine_chunk_bytes // PACKED_ROW // n * n)
        for start in range(0, packed.shape[0], per_chunk):
            self._reduce_quantized_chunk(packed[start : start + per_chunk], (job.quantized, start))

    def _reduce_quantized_chunk(self, chunk: torch.Tensor, key: Hashable) -> None:
        if self._yield_to is not None:
            self._yield_to()
        first_delay = 0.0
        if self.fault is not None:
            first_delay, _ = self.fault.delays(self.rank, self._step_fn())
        if self.reissuer is not None:
            self.reissuer.drain()  # re-issue covers all-reduces only; first attempts go first
        if first_delay > 0:
            time.sleep(first_delay)
        payload = chunk.numel()  # int8
        started = self.stats.launched()
        received = torch.empty_like(chunk)
        _wait_for_cuda(chunk)
        dist.all_to_all_single(received, chunk, group=self.group)
        _wait_for_cuda(received)
        # Rows i * k .. (i + 1) * k - 1 of ``received`` are rank i's share of this rank's rows.
        share = unpack_int8(received).view(self.world_size, -1, QUANT_BLOCK).sum(dim=0)
        residual = self._shard_residuals.get(key)
        if residual is not None and residual.shape == share.shape:
            share.add_(residual)
        summed = pack_int8(share)
        self._shard_residuals[key] = share.sub_(unpack_int8(summed))
        dist.all_gather_single(chunk, summed, group=self.group)
        _wait_for_cuda(chunk)
        # An all-to-all then an all-gather send a ring all-reduce's bytes.
        wire = ring_allreduce_wire_bytes(payload, self.world_size)
        self._account(started, started, payload=payload, wire=wire, reissued=False)

    def _all_reduce(self, chunk: torch.Tensor) -> None:
        _wait_for_cuda(chunk)
        dist.all_reduce(chunk, group=self.group)
        _wait_for_cuda(chunk)


def _wait_for_cuda(tensor: torch.Tensor) -> None:
    """NCCL collectives are asynchronous to the CPU: wait for the producer (backward) before,
    and for the reduction after, so timing and pacing see the real transfer. (Untested here:
    no GPU on the development machines.)"""
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
