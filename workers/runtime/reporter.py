"""Telemetry out, allocation in: the run's only two conversations with the control plane.

    reporter = Reporter.from_env()
    reporter.log({"loss": 2.1, "samples_per_s": 310.0}, step=12)
    reporter.close()

Every message is one XADD to ``telemetry_stream(job_id)`` with fields ``type`` and ``data``
(a JSON object that always carries ``ts`` (unix seconds, float) and ``rank``). Without a
Redis URL and job id the reporter is a no-op, so the same script runs outside Synclane.

A Redis outage never stops or slows training: ``log`` only appends to a bounded buffer
that a sender thread drains; while Redis is down the buffer keeps the newest messages
(the oldest are dropped and counted) and the thread retries with backoff, then sends what
it kept once Redis is back. Failures are counted and warned about once.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any

import redis

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig

log = logging.getLogger(__name__)

Number = float | int
MIN_ALLOCATION_BPS = 1_000_000  # an allocation of 0 (or less) is paced at 1 Mbit/s
# What a Redis call may raise when the server is slow, gone or confused.
_REDIS_ERRORS = (redis.RedisError, OSError)
# Messages kept while Redis is unreachable (about a minute of a busy run's telemetry).
BUFFER_MESSAGES = 5_000
# Messages per pipeline: one round trip carries a burst; a backlog drains in a few calls.
SEND_BATCH = 200
# Backoff between attempts while Redis is down: from RETRY_MIN_S doubling to RETRY_MAX_S.
RETRY_MIN_S = 0.2
RETRY_MAX_S = 2.0
# How long close() waits for the buffer to drain before giving up on it.
CLOSE_FLUSH_S = 3.0


class Reporter:
    """One metrics interface (torchtitan-style ``log(metrics, step)``/``close()``).

    ``metrics``, ``link`` and ``event`` are written only by ``metrics_rank`` (rank 0 by
    default) so a world of N ranks does not write N copies; ``alarm`` is written by any rank,
    because the rank that sees a problem is the one that knows about it.

    Statistics: ``sent`` messages written, ``errors`` failed write attempts (one per failed
    batch), ``dropped`` messages lost because the buffer was full while Redis was down.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        job_id: str | None = None,
        rank: int = 0,
        metrics_rank: int = 0,
        buffer: int = BUFFER_MESSAGES,
    ) -> None:
        self.job_id = job_id
        self.rank = rank
        self.metrics_rank = metrics_rank
        self.errors = 0
        self.sent = 0
        self.dropped = 0
        self._stream = p.telemetry_stream(job_id) if job_id is not None else None
        self._client: redis.Redis | None = None
        if redis_url is not None and job_id is not None:
            self._client = redis.Redis.from_url(
                redis_url, socket_timeout=2.0, socket_connect_timeout=2.0
            )
        self._buffer: deque[tuple[str, str]] = deque()
        self._capacity = buffer
        self._in_flight = 0  # messages taken by the sender, not yet written
        self._wake = threading.Condition()  # guards the buffer and the counters above
        self._closing = False
        self._sender: threading.Thread | None = None
        self._warned = False

    @classmethod
    def from_env(cls, config: RuntimeConfig | None = None) -> Reporter:
        """Return a reporter wired as the supervisor configured this rank (no-op if not)."""
        cfg = config or RuntimeConfig.from_env()
        return cls(
            redis_url=cfg.redis_url,
            job_id=cfg.job_id,
            rank=_dist_rank(cfg.rank),
            metrics_rank=cfg.metrics_rank,
        )

    @property
    def enabled(self) -> bool:
        """Return True when messages actually go to Redis."""
        return self._client is not None

    @property
    def is_metrics_rank(self) -> bool:
        return self.rank == self.metrics_rank

    def log(self, metrics: Mapping[str, Number], step: int) -> None:
        """Send one ``metrics`` message: ``{**metrics, "step": step, "ts", "rank"}``."""
        if self.is_metrics_rank:
            self._send(p.MSG_METRICS, {**metrics, "step": step})

    def link(
        self,
        *,
        src: int,
        dst: int,
        step: int,
        latency_s: float,
        bandwidth_bps: float,
        jitter_s: float = 0.0,
        state: str = "ok",
        reissued: bool = False,
    ) -> None:
        """Send one ``link`` message: the measured path from rank ``src`` to rank ``dst``.

        ``state`` is ``"ok"`` or ``"degraded"``; ``reissued``: the first probe was slow and
        the pair was probed once more. A probe round sends one per rank pair.
        """
        if self.is_metrics_rank:
            self._send(
                p.MSG_LINK,
                {
                    "src": src,
                    "dst": dst,
                    "step": step,
                    "latency_s": latency_s,
                    "bandwidth_bps": bandwidth_bps,
                    "jitter_s": jitter_s,
                    "state": state,
                    "reissued": reissued,
                },
            )

    def alarm(
        self,
        kind: str,
        *,
        value: float,
        threshold: float,
        step: int,
        state: str = "raised",
        detail: str = "",
    ) -> None:
        """Send one ``alarm`` message (any rank): ``{kind, state, value, threshold, step, detail}``."""
        if state not in p.ALARM_STATES:
            raise ValueError(f"alarm state must be one of {p.ALARM_STATES}, got {state!r}")
        self._send(
            p.MSG_ALARM,
            {
                "kind": kind,
                "state": state,
                "value": value,
                "threshold": threshold,
                "step": step,
                "detail": detail,
            },
        )

    def event(self, kind: str, **fields: Any) -> None:
        """Send one ``event`` message: ``{"kind": kind, **fields}`` (e.g. resumed, stopped)."""
        if self.is_metrics_rank:
            self._send(p.MSG_EVENT, {"kind": kind, **fields})

    def flush(self, timeout: float) -> bool:
        """Wait until every message logged so far is written; return False on timeout."""
        with self._wake:
            return self._wake.wait_for(
                lambda: not self._buffer and not self._in_flight, timeout=timeout
            )

    def close(self, timeout: float = CLOSE_FLUSH_S) -> None:
        """Write what is buffered (for up to ``timeout`` s), then release the connection.

        Later calls become no-ops; safe to call twice. What Redis did not take by then is
        counted in ``dropped``: a run must be able to exit while Redis is down.
        """
        if self._client is None:
            return
        self.flush(timeout)
        with self._wake:
            self._closing = True
            self.dropped += len(self._buffer)
            self._buffer.clear()
            self._wake.notify_all()
        sender, client, self._client = self._sender, self._client, None
        if sender is not None:
            sender.join(timeout=1.0)
        if sender is None or not sender.is_alive():
            with contextlib.suppress(redis.RedisError, OSError):
                client.close()
        # else: the sender is inside a write that will time out; the connection dies with it.
        if self.errors or self.dropped:
            log.warning(
                "reporter: %d telemetry writes failed, %d of %d messages dropped",
                self.errors,
                self.dropped,
                self.sent + self.dropped,
            )

    def _send(self, kind: str, data: Mapping[str, Any]) -> None:
        """Queue one message for the sender thread; never blocks on Redis."""
        payload = {**data, "ts": time.time(), "rank": self.rank}
        if self._client is None or self._stream is None:
            log.debug("telemetry (not sent) %s %s", kind, payload)
            return
        body = json.dumps(payload, separators=(",", ":"), default=float)
        with self._wake:
            if self._closing:
                return
            self._buffer.append((kind, body))
            self._drop_overflow()
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._drain, name="synclane-reporter", daemon=True
                )
                self._sender.start()
                # A script that never calls close() must not lose its last steps: the
                # sender is a daemon thread, and atexit runs while it is still alive.
                atexit.register(self.close)
            self._wake.notify_all()

    def _drop_overflow(self) -> None:
        """Keep the newest ``capacity`` unwritten messages (caller holds the lock).

        A batch in flight is not counted: if it fails it returns to the front, and the
        oldest messages are dropped then (memory holds at most capacity + one batch).
        """
        while len(self._buffer) > self._capacity:
            self._buffer.popleft()
            self.dropped += 1

    def _drain(self) -> None:
        """Sender thread: write batches in order; on failure keep them and back off."""
        retry_s = RETRY_MIN_S
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._buffer or self._closing)
                if self._closing:
                    return
                batch = [self._buffer.popleft() for _ in range(min(SEND_BATCH, len(self._buffer)))]
                self._in_flight = len(batch)
            ok = self._write(batch)
            with self._wake:
                self._in_flight = 0
                if ok:
                    self.sent += len(batch)
                    retry_s = RETRY_MIN_S
                else:
                    self._buffer.extendleft(reversed(batch))  # oldest first, as they came
                    self._drop_overflow()
                self._wake.notify_all()
                if not ok:
                    self._wake.wait_for(lambda: self._closing, timeout=retry_s)
                    retry_s = min(retry_s * 2, RETRY_MAX_S)

    def _write(self, batch: list[tuple[str, str]]) -> bool:
        """XADD ``batch`` in one round trip; return False (counted, warned once) on failure.

        The job is added to the active set with every batch: a Redis restart empties the
        set, and SADD of a present member costs nothing.
        """
        client = self._client
        if client is None or self._stream is None:  # closed meanwhile
            return False
        try:
            pipe = client.pipeline(transaction=False)
            for kind, body in batch:
                pipe.xadd(
                    self._stream,
                    {"type": kind, "data": body},
                    maxlen=p.STREAM_MAXLEN,
                    approximate=True,
                )
            pipe.sadd(p.ACTIVE_STREAMS_KEY, str(self.job_id))
            # Under a supervisor the run's Redis user may only write its own stream: the
            # SADD is refused (NOPERM) and the supervisor keeps the job registered instead.
            # Only the XADDs' own results decide whether the batch was sent.
            results = pipe.execute(raise_on_error=False)
            failed = [r for r in results[:-1] if isinstance(r, Exception)]
            if failed:
                raise failed[0]
            return True
        except _REDIS_ERRORS as exc:
            self._note_failure(exc)
            return False

    def _note_failure(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"synclane reporter: telemetry write failed ({exc!r}); training continues, "
                "messages are buffered (oldest dropped when full) and failures counted silently",
                RuntimeWarning,
                stacklevel=2,
            )


class AllocationClient:
    """This job's bandwidth allocation (bit/s), kept current by a daemon thread.

    Why a thread and not a poll every N steps: the throttle consults the allocation inside
    the comm hook, on the hot path, and must not pay a Redis round trip per bucket; and a new
    allocation should take effect within milliseconds, not "at the next poll step". The thread
    subscribes to ``allocation_channel(job_id)`` (the nudge) and re-reads
    ``allocation_key(job_id)`` on every nudge and every ``refresh_s`` seconds, since pub/sub
    drops messages across reconnects and the key is the truth. ``current_bps()`` is a plain
    attribute read. None means unlimited (key absent, or no control plane); 0 is paced at
    ``MIN_ALLOCATION_BPS`` (a zero rate would block the run forever).
    """

    def __init__(
        self, *, redis_url: str | None, job_id: str | None, refresh_s: float = 2.0
    ) -> None:
        self.job_id = job_id
        self.refresh_s = refresh_s
        self.updates = 0  # how many times the value changed, for tests
        self._bps: int | None = None
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._client: redis.Redis | None = None
        if redis_url is not None and job_id is not None:
            self._client = redis.Redis.from_url(
                redis_url, socket_timeout=5.0, socket_connect_timeout=2.0
            )

    @classmethod
    def from_env(cls, config: RuntimeConfig | None = None) -> AllocationClient:
        cfg = config or RuntimeConfig.from_env()
        return cls(redis_url=cfg.redis_url, job_id=cfg.job_id)

    def start(self) -> AllocationClient:
        """Read the key once, then follow changes in a daemon thread. Returns self."""
        if self._client is None or self._thread is not None:
            return self
        self._refresh()
        self._thread = threading.Thread(target=self._run, name="synclane-allocation", daemon=True)
        self._thread.start()
        return self

    def current_bps(self) -> int | None:
        """Return the allocation in bit/s, or None for unlimited."""
        return self._bps

    def wait_for_change(self, timeout: float) -> int | None:
        """Block until the value changes (or ``timeout``); return the current value."""
        with self._changed:
            seen = self.updates
            self._changed.wait_for(lambda: self.updates != seen, timeout=timeout)
        return self._bps

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.refresh_s + 6.0)
        if self._client is not None:
            self._client.close()

    def _run(self) -> None:
        assert self._client is not None and self.job_id is not None
        channel = p.allocation_channel(self.job_id)
        while not self._stop.is_set():
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(channel)
                self._refresh()  # a change may have landed before the subscription
                next_refresh = time.monotonic() + self.refresh_s
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=min(0.5, self.refresh_s))
                    if message is not None or time.monotonic() >= next_refresh:
                        self._refresh()
                        next_refresh = time.monotonic() + self.refresh_s
            except _REDIS_ERRORS as exc:
                log.debug("allocation client: %r; retrying", exc)
                self._stop.wait(1.0)
            finally:
                with contextlib.suppress(redis.RedisError, OSError):
                    pubsub.close()

    def _refresh(self) -> None:
        assert self._client is not None and self.job_id is not None
        try:
            raw = self._client.get(p.allocation_key(self.job_id))
        except _REDIS_ERRORS as exc:
            log.debug("allocation read failed: %r", exc)
            return
        value = _parse_bps(raw)
        if value != self._bps:
            with self._changed:
                self._bps = value
                self.updates += 1
                self._changed.notify_all()


def _parse_bps(raw: object) -> int | None:
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        value = int(float(text))
    except ValueError:
        log.warning("allocation: ignoring non-numeric value %r", text)
        return None
    # Zero means "nothing granted"; pacing at zero would block forever, so crawl instead.
    return max(value, MIN_ALLOCATION_BPS)


def _dist_rank(default: int) -> int:
    """Return the torch.distributed rank when a group is up, else ``default`` (env RANK)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except ImportError:  # pragma: no cover - torch is a hard dependency of the runtime
        pass
    return int(os.environ.get("RANK", default))
