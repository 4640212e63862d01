"""Live logs on ws/jobs/<id>/: a member gets every rank's backlog then new lines; Bob gets none."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from controlplane.jobs.models import Job
from controlplane.lib.publish import FORWARD
from controlplane.telemetry.groups import job_group
from tests.telemetry.test_consumer import ORIGIN, communicator, cookie_for, make_job
from tests.telemetry.test_log_follower import append, rank_log
from tests.telemetry.test_multinode_logs import PLACEMENT, node_log

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def next_log(ws) -> dict:
    while True:
        message = await ws.receive_json_from(timeout=10)
        if message["type"] == "log":
            return message


async def test_a_member_gets_each_ranks_backlog_then_new_lines(
    private_redis, alice, vision, settings, tmp_path
):
    settings.SYNCLANE_JOBS_DIR = tmp_path
    job = await make_job(vision, alice)
    append(rank_log(job.run_dir, 0), *(f"old {i}" for i in range(500)))
    rank1 = rank_log(job.run_dir, 1)
    append(rank1, "rank one")
    ws = communicator(job.pk, ORIGIN, (b"cookie", await cookie_for(alice)))
    assert (await ws.connect())[0]
    backlog = [await next_log(ws), await next_log(ws)]
    assert [(m["rank"], len(m["lines"])) for m in backlog] == [("0", 200), ("1", 1)]
    assert backlog[0]["lines"][-1] == "old 499"

    append(rank1, "fresh line")
    live = await next_log(ws)
    assert (live["rank"], live["stream"], live["lines"]) == ("1", "stdout", ["fresh line"])
    await ws.disconnect()


async def test_bob_is_refused_and_gets_no_line_of_alices_logs(
    private_redis, alice, bob, vision, settings, tmp_path
):
    settings.SYNCLANE_JOBS_DIR = tmp_path
    job = await make_job(vision, alice)
    append(rank_log(job.run_dir, 0), "alice's secret")
    ws = communicator(job.pk, ORIGIN, (b"cookie", await cookie_for(bob)))
    await ws.connect()
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    assert await ws.receive_nothing(timeout=1.5)


@database_sync_to_async
def place(job, placement) -> None:
    Job.objects.filter(pk=job.pk).update(placement=placement, world_size=4)


async def test_a_run_across_nodes_is_followed_by_global_rank_and_a_new_placement_too(
    private_redis, alice, vision, settings, tmp_path
):
    settings.SYNCLANE_JOBS_DIR = tmp_path
    job = await make_job(vision, alice)
    await place(job, PLACEMENT)
    append(node_log(job.run_dir, 1, 1), "n2's second rank")
    append(job.run_dir / "torchrun.node1.log", "n2's agent")
    ws = communicator(job.pk, ORIGIN, (b"cookie", await cookie_for(alice)))
    assert (await ws.connect())[0]
    backlog = [await next_log(ws), await next_log(ws)]
    assert [(m["rank"], m["lines"]) for m in backlog] == [
        ("3", ["n2's second rank"]),
        ("torchrun.node1", ["n2's agent"]),
    ]

    # Readmitted on one node: the running status makes the socket read the placement again.
    await place(job, {"node": "n1", "ranks": 4})
    append(rank_log(job.run_dir, 3), "on one node")
    status = {"type": "status", "job": job.pk, "status": "running"}
    await get_channel_layer().group_send(job_group(job.pk), {"type": FORWARD, "payload": status})
    live = await next_log(ws)
    assert (live["rank"], live["lines"]) == ("3", ["on one node"])
    await ws.disconnect()
