"""Submit through the API, run a real 2-rank torchrun, watch it over a websocket."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import websockets
from django.test import Client

from controlplane.jobs.models import Job
from controlplane.telemetry.models import MetricSample
from workers.supervisor.process import descendants, group_alive, pid_alive

from ..conftest import PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


class SocketListener(threading.Thread):
    """Collects every message of ws/jobs/<id>/ until a terminal status (or timeout)."""

    def __init__(self, live, job_id: int, cookie: str, origin: str | None = None):
        super().__init__(daemon=True)
        self.uri = f"ws://127.0.0.1:{live.port}/ws/jobs/{job_id}/"
        self.headers = {"Cookie": f"sessionid={cookie}", "Origin": origin or live.url}
        self.messages: list[dict] = []
        self.close_code: int | None = None
        self.connected = threading.Event()

    def run(self) -> None:
        asyncio.run(self._listen())

    async def _listen(self) -> None:
        try:
            async with websockets.connect(self.uri, additional_headers=self.headers) as ws:
                self.connected.set()
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline:
                    msg = json.loads(
                        await asyncio.wait_for(ws.recv(), timeout=deadline - time.monotonic())
                    )
                    self.messages.append(msg)
                    if msg["type"] == "status" and msg["status"] in {
                        "succeeded",
                        "failed",
                        "cancelled",
                    }:
                        return
        except websockets.ConnectionClosed as closed:
            self.close_code = closed.rcvd.code if closed.rcvd else None
        except websockets.InvalidStatus as refused:
            self.close_code = refused.response.status_code
        finally:
            self.connected.set()


def submit(live, token: str, **overrides) -> dict:
    body = {
        "tenant": "vision",
        "name": "it",
        "workload": "tiny_gpt",
        "world_size": 2,
        "steps": 30,
        "sync": "full",
    }
    status, job = live.request("POST", "/api/v1/jobs/", {**body, **overrides}, token=token)
    assert status == 201, job
    return job


def test_a_submitted_job_runs_to_success_with_live_metrics(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(live, token, hyperparameters={"checkpoint_every": 10, "eval_every": 15})
    listener = SocketListener(live, job["id"], session_cookie(alice))
    listener.start()
    listener.connected.wait(10)

    done = live.wait_for_job(job["id"], token, {"succeeded", "failed", "cancelled"})
    listener.join(30)

    assert done["status"] == "succeeded", done
    assert done["exit_code"] == 0 and done["last_step"] == 30
    metrics = [m for m in listener.messages if m["type"] == "metrics"]
    assert metrics, f"no metrics on the websocket: {listener.messages[:5]}"
    assert {"step", "loss", "samples_per_s", "tokens_per_s", "step_time_s"} <= set(
        metrics[-1]["data"]
    )
    statuses = [m["status"] for m in listener.messages if m["type"] == "status"]
    assert statuses[-1] == "succeeded" and "running" in statuses
    assert MetricSample.objects.filter(job_id=job["id"]).count() >= 2
    assert Job.objects.get(pk=job["id"]).events.filter(to_status="running").exists()


def test_cancel_mid_run_ends_the_process_group(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(live, token, steps=100_000)
    running = live.wait_for_job(job["id"], token, {"running"}, timeout=120)
    pgid = running["placement"]["pgid"]
    # Wait for real training (a metrics report), not just a spawned launcher.
    deadline = time.monotonic() + 60
    while not MetricSample.objects.filter(job_id=job["id"]).exists():
        assert time.monotonic() < deadline, "no metrics reported"
        time.sleep(0.2)
    assert group_alive(pgid)
    ranks = [pid for pid in descendants(pgid) if "workers.workloads.tiny_gpt" in cmdline(pid)]
    assert len(ranks) == 2, ranks

    status, _ = live.request("POST", f"/api/v1/jobs/{job['id']}/cancel/", token=token)
    assert status == 202
    done = live.wait_for_job(job["id"], token, {"cancelled", "failed", "succeeded"}, timeout=60)

    assert done["status"] == "cancelled"
    assert not group_alive(pgid), "torchrun outlived the cancel"
    assert not [pid for pid in ranks if pid_alive(pid)], "ranks outlived the cancel"


def test_bob_cannot_subscribe_to_alices_job(live, alice, bob):
    token = live.token("alice", PASSWORD)
    job = submit(live, token, steps=1)
    listener = SocketListener(live, job["id"], session_cookie(bob))
    listener.start()
    listener.join(15)
    assert listener.close_code == 4404
    assert listener.messages == []


def test_a_foreign_origin_is_refused(live, alice):
    token = live.token("alice", PASSWORD)
    job = submit(live, token, steps=1)
    listener = SocketListener(live, job["id"], session_cookie(alice), origin="http://evil.example")
    listener.start()
    listener.join(15)
    assert listener.close_code == 403
    assert listener.messages == []


def test_healthz_counts_the_live_worker(live):
    status, body = live.request("GET", "/healthz")
    assert status == 200
    assert body == {"status": "ok", "database": "ok", "redis": "ok", "workers": 1}
