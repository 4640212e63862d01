"""Telemetry out, allocation in: the run's only two conversations with the control plane.

    reporter = Reporter.from_env()
    reporter.log({"loss": 2.1, "samples_per_s": 310.0}, step=12)
    reporter.close()

Every message is one XADD to ``telemetry_stream(job_id)`` with fields ``type`` and ``data``
(a JSON object that always carries ``ts`` (unix seconds, float) and ``rank``). Without a
Redis URL and job id the reporter is a no-op, so the same script runs outside Synclane.
A Redis hiccup never stops training: errors are caught, counted and warned about once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import warnings
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


class Reporter:
    """One metrics interface (torchtitan-style ``log(metrics, step)``/``close()``).

    ``metrics``, ``link`` and ``event`` are written only by ``metrics_rank`` (rank 0 by
    default) so a world of N ranks does not write N copies; ``alarm`` is written by any rank,
    because the rank that sees a problem is the one that knows about it.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        job_id: str | None = None,
        rank: int = 0,
        metrics_rank: int = 0,
    ) -> None:
        self.job_id = job_id
        self.rank = rank
        self.metrics_rank = metrics_rank
        self.errors = 0  # failed writes, for tests and the end-of-run summary
        self.sent = 0
        self._stream = p.telemetry_stream(job_id) if job_id is not None else None
        self._client: redis.Redis | None = None
        if redis_url is not None and job_id is not None:
            self._client = redis.Redis.from_url(
                redis_url, socket_timeout=2.0, socket_connect_timeout=2.0
            )
        self._registered = False
        self._warned = False
        self._lock = threading.Lock()  # the throttle/probe threads may raise alarms too

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

    def close(self) -> None:
        """Release the connection; later calls become no-ops. Safe to call twice."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                client.close()
        if self.errors:
            log.warning(
                "reporter: %d of %d telemetry writes failed", self.errors, self.errors + self.sent
            )

    def _send(self, kind: str, data: Mapping[str, Any]) -> None:
        payload = {**data, "ts": time.time(), "rank": self.rank}
        if self._client is None or self._stream is None:
            log.debug("telemetry (not sent) %s %s", kind, payload)
            return
        body = json.dumps(payload, separators=(",", ":"), default=float)
        with self._lock:
            try:
                pipe = self._client.pipeline(transaction=False)
                pipe.xadd(
                    self._stream,
                    {"type": kind, "data": body},
                    maxlen=p.STREAM_MAXLEN,
                    approximate=True,
                )
                if not self._registered:
                    pipe.sadd(p.ACTIVE_STREAMS_KEY, str(self.job_id))
                pipe.execute()
                self._registered = True
                self.sent += 1
            except _REDIS_ERRORS as exc:
                self._note_failure(exc)

    def _note_failure(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"synclane reporter: telemetry write failed ({exc!r}); training continues, "
                "further failures are counted silently",
                RuntimeWarning,
                stacklevel=3,
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
