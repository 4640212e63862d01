"""Runs across nodes on one machine: three Celery workers, each a node of its own.

A stack of its own (``devstack.LocalNode``: n1, n2, n3 on 127.0.0.1-3, 2 slots each, each
worker consuming ``node.<name>``) on its own Redis database; the suite-wide stack's beat and
worker are stopped meanwhile (both share the test database). Jobs are placed here as the scheduler service
will place them: admitted with ``Job.placement["nodes"]`` and one launch per node on that
node's queue, in one transaction. Real torchrun on gloo, real kill -9.

    python -m controlplane.devstack test -q tests/integration/test_multinode.py
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import transaction
from django.db.models import F

from controlplane.jobs import state
from controlplane.jobs.models import Job, Node
from controlplane.jobs.nodes import node_drain, node_uncordon
from controlplane.jobs.placement import ranks_per_node
from controlplane.jobs.services import job_cancel
from controlplane.telemetry import logs
from controlplane.telemetry.models import MetricSample
from tests import faults
from tests.faults import wait_until

from .conftest import Live, _database_url, live_stack, stopped

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NODES = ("n1", "n2", "n3")
ADDRESSES = {"n1": "127.0.0.1", "n2": "127.0.0.2", "n3": "127.0.0.3"}
STEPS = 24
# Fixed seed, small model: the same job on one node and on two must give the same losses.
HYPER = {"seed": 7, "checkpoint_every": 4, "batch_size": 4, "seq_len": 16}


class Cluster:
    def __init__(self, live: Live, redis_url: str) -> None:
        self.live = live
        self.broker = Celery("multinode-test", broker=redis_url)

    def launch(self, job: Job, node_rank: int | None, node: str) -> None:
        args = (job.pk,) if node_rank is None else (job.pk, node_rank)
        self.broker.send_task("workers.tasks.launch_job", args=args, queue=f"node.{node}")

    def wait_for_nodes(self, timeout: float = 90) -> None:
        host = socket.gethostname()
        wanted = {f"synclane-{name}@{host}" for name in NODES}

        def all_answer() -> bool:
            replies = self.broker.control.ping(timeout=1.0)
            return wanted <= {name for reply in replies for name in reply}

        wait_until(all_answer, timeout, "every node's worker to answer", interval=0.5)


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, live, tmp_path_factory) -> Iterator[Cluster]:
    with django_db_blocker.unblock():
        database_url = _database_url()
    state_dir = Path(settings.RUN_DIR) / "multinode"
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + "/2"
    env = {
        "REDIS_URL": redis_url,
        "SYNCLANE_NODE_SLOTS": "2",
        "SYNCLANE_NODE_LOST_AFTER_S": "8",  # a node silent this long is lost
    }
    state_dir.mkdir(parents=True, exist_ok=True)
    with (
        stopped(live),
        live_stack(
            # Fresh: job ids start again with each test database, and a run resumes from
            # whatever checkpoint its folder holds.
            jobs_dir=tmp_path_factory.mktemp("multinode-jobs"),
            state_dir=state_dir,
            database_url=database_url,
            env=env,
            nodes=len(NODES),
        ) as stack,
    ):
        cluster = Cluster(stack, redis_url)
        cluster.wait_for_nodes()
        yield cluster
    # The nodes share the suite's test database: once their workers are gone they would still
    # count as alive for SYNCLANE_NODE_LOST_AFTER_S, and a later module's scheduler would
    # place jobs on their queues, which nobody consumes any more.
    with django_db_blocker.unblock():
        Node.objects.filter(name__in=NODES).delete()


def admit(cluster: Cluster, vision, *, name: str, nodes: list[tuple[str, list[int]]], **fields):
    """Create and admit a 4-rank tiny_gpt job placed on ``nodes``; launch it on each.

    One node: placement without "nodes" (a run on one node, as today), launched on that
    node's queue. Several: placement["nodes"] in node-rank order, one launch per node.
    """
    placement: dict = {}
    if len(nodes) > 1:
        placement = {
            "nodes": [
                {"node": node, "address": ADDRESSES[node], "ranks": ranks} for node, ranks in nodes
            ],
            "why": f"placed by the test on {', '.join(node for node, _ in nodes)}",
        }
    with transaction.atomic():
        job = Job.objects.create(
            tenant=vision,
            queue=vision.queues.get(name="default"),
            name=name,
            workload="tiny_gpt",
            world_size=sum(len(ranks) for _, ranks in nodes),
            steps=fields.pop("steps", STEPS),
            sync="full",
            hyperparameters={**HYPER, **fields.pop("hyperparameters", {})},
            **fields,
        )
        job = state.transition(job, "admitted", reason="placed by the test", placement=placement)
        if len(nodes) > 1:
            for rank, (node, _) in enumerate(nodes):
                transaction.on_commit(lambda r=rank, n=node: cluster.launch(job, r, n))
        else:
            transaction.on_commit(lambda: cluster.launch(job, None, nodes[0][0]))
    return job


def path_of(job_id: int) -> list[str]:
    events = Job.objects.get(pk=job_id).events.exclude(from_status=F("to_status"))
    return list(events.values_list("to_status", flat=True))


def finished(job_id: int, timeout: float = 300) -> Job:
    return wait_until(
        lambda: (j := Job.objects.get(pk=job_id)).is_terminal and j,
        timeout,
        f"job {job_id} to finish",
        interval=0.5,
    )


def losses(job_id: int) -> dict[int, float]:
    rows = MetricSample.objects.filter(job_id=job_id).order_by("step", "id")
    return {row.step: row.data["loss"] for row in rows if "loss" in row.data}


def trained_to(job_id: int, step: int):
    return lambda: (Job.objects.get(pk=job_id).last_step or 0) >= step


def test_a_job_placed_two_plus_two_succeeds_with_the_losses_of_the_same_job_on_one_node(
    cluster, vision
):
    one = admit(cluster, vision, name="one-node", nodes=[("n1", [0, 1, 2, 3])])
    assert finished(one.pk).status == "succeeded", Job.objects.get(pk=one.pk).status_reason

    started = time.monotonic()
    two = admit(cluster, vision, name="two-nodes", nodes=[("n1", [0, 1]), ("n2", [2, 3])])
    running = wait_until(
        lambda: (j := Job.objects.get(pk=two.pk)).status != "admitted" and j,
        120,
        "the job to start on both nodes",
    )
    assert running.placement["nodes"][1]["node"] == "n2"
    assert running.placement["node"] == "n1"  # node rank 0 drives the job
    rdzv_host, _, rdzv_port = running.placement["rdzv"].rpartition(":")
    assert rdzv_host == ADDRESSES["n1"] and int(rdzv_port) > 0
    done = finished(two.pk)
    assert done.status == "succeeded", done.status_reason
    # On a loaded machine a rendezvous may fail once (a store connection closed): the whole
    # run then restarts from its checkpoint, which changes no loss.
    path = path_of(two.pk)
    assert path[:2] == ["admitted", "running"] and path[-1] == "succeeded", path
    assert path.count("restarting") <= 1, path
    print(f"2+2 run of {STEPS} steps: {time.monotonic() - started:.1f} s")

    single, split = losses(one.pk), losses(two.pk)
    assert max(single) == STEPS and set(single) == set(split), (sorted(single), sorted(split))
    assert split == single  # bit for bit: the same ranks, data and reductions
    # Each node's torchrun ran its own 2 ranks of the same attempt, logged in the node's own
    # folder, and the logs are read by global rank: ranks 2 and 3 are n2's local ranks 0 and 1.
    run_dir = cluster.live.jobs_dir / f"job-{two.pk}"
    assert (run_dir / "torchrun.node1.log").exists()
    newest = [logs.latest_attempt(run_dir / "logs" / f"node{i}") for i in (0, 1)]
    assert all(a is not None and sorted(p.name for p in a.iterdir()) == ["0", "1"] for a in newest)
    assert len({a.parent.name.split("_", 1)[0] for a in newest if a}) == 1, newest  # one run id
    nodes = ranks_per_node(done.placement)
    assert nodes == (2, 2)
    for rank in (2, 3):
        path = logs.log_path(run_dir, rank=rank, stream="stdout", nodes=nodes)
        assert path == newest[1] / str(rank - 2) / "stdout.log" and path.is_file()
    head = logs.log_path(run_dir, rank=0, stream="stdout", nodes=nodes)
    assert any(line.startswith("tiny_gpt:") for line in logs.tail(head))  # global rank 0 prints
    assert logs.log_path(run_dir, rank=3, stream="torchrun", nodes=nodes) == (
        run_dir / "torchrun.node1.log"
    )


def test_a_killed_node_s_job_resumes_from_its_checkpoint_on_the_capacity_left(cluster, vision):
    job = admit(
        cluster,
        vision,
        name="node-kill",
        nodes=[("n1", [0, 1]), ("n2", [2, 3])],
        steps=100_000,
    )
    wait_until(trained_to(job.pk, 9), 180, "the job to train past a checkpoint", interval=0.5)
    stack = cluster.live.stack
    faults.kill_node(stack, "worker-n2")
    try:
        requeued = wait_until(
            lambda: Job.objects.get(pk=job.pk).events.filter(to_status="queued").first(),
            90,
            "the run to be requeued",
        )
        assert "node n2 lost" in requeued.reason, requeued.reason
        # Readmitted on the nodes left, from the checkpoint the run wrote before the loss.
        resumed = wait_until(
            lambda: (
                (j := Job.objects.get(pk=job.pk)).status == "running"
                and path_of(job.pk).count("running") >= 2
                and j
            ),
            180,
            "the job to run again",
            interval=0.5,
        )
        assert resumed.resumed_from_step is not None and resumed.resumed_from_step >= 4
        assert requeued.reason.endswith(f"resumes from step {resumed.resumed_from_step}")
        where = {resumed.placement.get("node")} | {
            n["node"] for n in resumed.placement.get("nodes", [])
        }
        assert "n2" not in where, resumed.placement
        wait_until(trained_to(job.pk, resumed.resumed_from_step + 2), 120, "steps after the resume")
    finally:
        job_cancel(job=Job.objects.get(pk=job.pk), actor=None)
        faults.revive_node(stack, "worker-n2")
    assert finished(job.pk, timeout=120).status == "cancelled"
    cluster.wait_for_nodes()


def test_draining_a_node_checkpoints_the_job_requeues_it_and_it_resumes(cluster, vision):
    job = admit(
        cluster,
        vision,
        name="drain",
        nodes=[("n2", [0, 1]), ("n3", [2, 3])],
        steps=40,
    )
    wait_until(trained_to(job.pk, 9), 180, "the job to train past a checkpoint", interval=0.5)
    # The site admin's drain: n3 is cordoned and its jobs asked to checkpoint and requeue.
    node, asked = node_drain(node=Node.objects.get(name="n3"), actor=None, reason="maintenance")
    try:
        assert asked == [job.pk] and node.state == "draining"
        wait_until(lambda: path_of(job.pk).count("running") >= 2, 180, "the job to run again")
        resumed = Job.objects.get(pk=job.pk)
        path = path_of(job.pk)
        assert path[:5] == ["admitted", "running", "preempted", "queued", "admitted"], path
        preempted = resumed.events.filter(to_status="preempted").first()
        checkpoint = int(preempted.reason.rsplit(" ", 1)[1])
        assert checkpoint >= 9  # the stop wrote a checkpoint at the step it reached
        assert resumed.resumed_from_step == checkpoint
        where = {part["node"] for part in resumed.placement.get("nodes", [])}
        assert where and "n3" not in where, resumed.placement  # resumed elsewhere
        done = finished(job.pk)
        assert done.status == "succeeded", done.status_reason
        assert max(losses(job.pk)) == 40
    finally:
        node_uncordon(node=Node.objects.get(name="n3"), actor=None)


def test_a_node_s_worker_shutting_down_requeues_the_whole_run_at_a_checkpoint(cluster, vision):
    job = admit(
        cluster,
        vision,
        name="worker-sigterm",
        nodes=[("n1", [0, 1]), ("n3", [2, 3])],
        steps=100_000,
    )
    wait_until(trained_to(job.pk, 9), 180, "the job to train past a checkpoint", interval=0.5)
    worker = cluster.live.stack.get("worker-n3").proc
    os.kill(worker.pid, 15)  # a warm shutdown: the node's supervisors drain
    try:
        requeued = wait_until(
            lambda: Job.objects.get(pk=job.pk).events.filter(to_status="queued").first(),
            90,
            "the run to be requeued",
        )
        assert "node n3 shutting down" in requeued.reason, requeued.reason
        checkpoint = Job.objects.get(pk=job.pk).checkpoint_step
        assert checkpoint is not None and checkpoint >= 9
    finally:
        job_cancel(job=Job.objects.get(pk=job.pk), actor=None)
    assert finished(job.pk, timeout=120).status == "cancelled"
    cluster.wait_for_nodes()  # the stack starts the worker again


def test_a_rank_killed_on_another_node_restarts_the_whole_run_from_its_checkpoint(cluster, vision):
    steps = 40
    job = admit(
        cluster, vision, name="follower-rank-kill", nodes=[("n1", [0, 1]), ("n2", [2, 3])],
        steps=steps, max_restarts=2,
    )  # fmt: skip
    wait_until(trained_to(job.pk, 9), 180, "the job to train past a checkpoint", interval=0.5)
    pgid_file = cluster.live.jobs_dir / f"job-{job.pk}" / "torchrun.node1.pgid"
    follower_torchrun = int(pgid_file.read_text())
    assert set(faults.rank_pids(follower_torchrun)) == {2, 3}  # n2 runs global ranks 2 and 3
    faults.kill_rank(follower_torchrun, rank=3)

    restarting = wait_until(
        lambda: Job.objects.get(pk=job.pk).events.filter(to_status="restarting").first(),
        90,
        "the whole run to restart",
    )
    assert "rank 3 killed by SIGKILL" in restarting.reason, restarting.reason
    done = finished(job.pk)
    assert done.status == "succeeded", done.status_reason
    path = path_of(job.pk)
    assert path.index("restarting") < len(path) - 1 - path[::-1].index("running"), path
    assert done.resumed_from_step is not None and done.resumed_from_step >= 4
    assert max(losses(job.pk)) == steps
