"""``synclane watch``: a job's progress live from its websocket, surviving lost connections.

Steps: 1. read the job over the API; 2. open ``ws/jobs/<id>/`` with the API token (and the
server's own Origin, which the server checks); 3. apply every ``status`` and ``metrics``
message to a ``Progress`` state; 4. when the connection drops, wait (exponential backoff,
capped), backfill what was missed from ``/metrics/?after_step=N`` and the job itself, and
reconnect (the greeting brings the status again); 5. stop when the job is finished.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect
from websockets.typing import Origin

from controlplane.cli.client import Api, CliError

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
# The server closes with these when the token is not valid or the job is not yours.
REFUSED = {4401: "not logged in (run `synclane login`)", 4404: "no such job"}


@dataclass
class Progress:
    """What the watch shows; every field is the latest known value."""

    job: int
    steps: int
    status: str = "queued"
    step: int = 0
    loss: float | None = None
    samples_per_s: float | None = None
    reconnects: int = 0

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def apply(self, message: dict[str, Any]) -> None:
        """Update from one websocket message (``status`` or ``metrics``; others ignored)."""
        if message.get("type") == "status":
            self.status = str(message.get("status", self.status))
            self.step = max(self.step, int(message.get("last_step") or 0))
        elif message.get("type") == "metrics":
            self.apply_metrics(message.get("data") or {})

    def apply_metrics(self, data: dict[str, Any]) -> None:
        if isinstance(data.get("step"), int):
            self.step = max(self.step, data["step"])
        if isinstance(data.get("loss"), int | float):
            self.loss = float(data["loss"])
        if isinstance(data.get("samples_per_s"), int | float):
            self.samples_per_s = float(data["samples_per_s"])


@dataclass
class Backoff:
    """Waits of 0.5 s, 1 s, 2 s, … capped at ``cap_s``; ``reset`` after a good connection."""

    first_s: float = 0.5
    cap_s: float = 10.0
    attempt: int = field(default=0)

    def next(self) -> float:
        wait = min(self.cap_s, self.first_s * 2**self.attempt)
        self.attempt += 1
        return wait

    def reset(self) -> None:
        self.attempt = 0


def backfill(api: Api, progress: Progress) -> None:
    """Catch up over the API: the job's status and the metrics after the last seen step."""
    job = api.get(f"/api/v1/jobs/{progress.job}/")
    progress.status = job["status"]
    history = api.get(f"/api/v1/jobs/{progress.job}/metrics/", after_step=progress.step)
    for name, attr in (("loss", "loss"), ("samples_per_s", "samples_per_s")):
        series = history["metrics"].get(name) or {}
        if series.get("y"):
            setattr(progress, attr, float(series["y"][-1]))
    progress.step = max(
        progress.step, int(history.get("last_step") or 0), int(job["last_step"] or 0)
    )


def socket_url(base_url: str, job_id: int) -> str:
    parts = urlsplit(base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}/ws/jobs/{job_id}/"


def messages(api: Api, job_id: int) -> Iterator[dict[str, Any]]:
    """Messages of one connection until it closes; CliError if the server refused us."""
    origin = api.login.url.rstrip("/")
    with connect(
        socket_url(origin, job_id),
        additional_headers={"Authorization": f"Token {api.login.token}"},
        origin=Origin(origin),
        open_timeout=10,
    ) as ws:
        for raw in ws:
            yield json.loads(raw)
        code = ws.close_code
    if code in REFUSED:
        raise CliError(REFUSED[code])


def watch(
    api: Api,
    job_id: int,
    *,
    show: Callable[[Progress], None],
    note: Callable[[str], None],
    give_up_after_s: float = 300.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Progress:
    """Follow the job until it finishes; ``show`` after every change, ``note`` for events.

    Raises CliError when the job is not visible, or when no connection could be made for
    ``give_up_after_s`` seconds.
    """
    job = api.get(f"/api/v1/jobs/{job_id}/")
    progress = Progress(job=job_id, steps=int(job["steps"]), status=job["status"])
    progress.step = int(job["last_step"] or 0)
    note(f"status: {progress.status}")
    backoff, failing_since = Backoff(), None
    while not progress.finished:
        try:
            for message in messages(api, job_id):
                failing_since = None
                backoff.reset()
                before = progress.status
                progress.apply(message)
                if progress.status != before:
                    note(f"status: {progress.status}")
                show(progress)
                if progress.finished:
                    return progress
        except (OSError, TimeoutError, WebSocketException) as exc:
            if isinstance(exc, InvalidStatus) and exc.response.status_code in (401, 403):
                raise CliError(
                    "the server refused the websocket (check login and Origin)"
                ) from None
            failing_since = failing_since or time.monotonic()
        else:
            failing_since = failing_since or time.monotonic()
        if time.monotonic() - failing_since > give_up_after_s:
            raise CliError(f"lost the connection to {api.login.url} for {give_up_after_s:.0f} s")
        wait = backoff.next()
        progress.reconnects += 1
        note(f"connection lost; reconnecting in {wait:.1f} s")
        sleep(wait)
        try:
            backfill(api, progress)
        except CliError:
            continue  # the server is still away; the next attempt tries again
        show(progress)
    return progress
