"""Nodes in a scheduling pass: a cordon stops new placements, a lost node's slots stop counting,
a drained node settles to cordoned once it holds no job."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from controlplane.jobs import adapters
from controlplane.jobs.choices import JobStatus, NodeState
from controlplane.jobs.models import Job, Node
from controlplane.jobs.nodes import node_cordon, node_drain, node_uncordon, nodes_message
from controlplane.jobs.scheduler import schedule_pass
from controlplane.jobs.services import job_submit
from controlplane.jobs.spec import JobSpec, SpecError


def submit(tenant, actor, *, ranks: int, name: str = "j") -> Job:
    spec = JobSpec(name=name, workload="tiny_gpt", world_size=ranks, steps=5)
    return job_submit(tenant=tenant, spec=spec, actor=actor)


def node(name: str, slots: int = 2, *, silent_s: float = 0.0) -> Node:
    seen = timezone.now() - dt.timedelta(seconds=silent_s)
    return Node.objects.create(name=name, slots=slots, fabric_mbps=1000, last_seen=seen)


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def test_a_cordoned_node_takes_no_new_job(vision, alice):
    n1 = node("n1")
    node_cordon(node=n1, actor=alice)
    job = submit(vision, alice, ranks=1)
    schedule_pass()
    assert status(job) == JobStatus.QUEUED
    node_uncordon(node=n1, actor=alice)
    schedule_pass()
    assert status(job) == JobStatus.ADMITTED


def test_a_cordon_keeps_the_slots_its_running_jobs_hold(vision, alice):
    n1, _ = node("n1", slots=2), node("n2", slots=2)
    running = submit(vision, alice, ranks=2, name="running")
    Job.objects.filter(pk=running.pk).update(status=JobStatus.RUNNING, placement={"node": "n1"})
    node_cordon(node=n1, actor=alice)
    # n1's 2 slots are held by its job; n2's 2 are free: a 2-rank job fits, a 3-rank does not.
    assert adapters.cluster_capacity().slots == 4
    fits = submit(vision, alice, ranks=2, name="fits")
    schedule_pass()
    assert status(fits) == JobStatus.ADMITTED
    assert status(running) == JobStatus.RUNNING  # a cordon stops nothing that runs


def test_a_submit_larger_than_the_ready_nodes_but_not_the_cluster_waits(vision, alice):
    n1 = node("n1", slots=4)
    node_cordon(node=n1, actor=alice)
    job = submit(vision, alice, ranks=4)  # not refused as larger than the cluster
    schedule_pass()
    assert status(job) == JobStatus.QUEUED


def test_a_job_larger_than_every_node_together_is_refused(vision, alice):
    node("n1", slots=2)
    node("n2", slots=2)
    try:
        submit(vision, alice, ranks=5)
    except SpecError as exc:
        assert exc.errors["world_size"] == ["needs 5 slots; the cluster has 4"]
    else:
        raise AssertionError("a 5-rank job was accepted on 4 slots")


def test_a_lost_nodes_slots_no_longer_count(vision, alice, settings):
    settings.SYNCLANE_NODE_LOST_AFTER_S = 30
    node("n1", slots=2)
    node("n2", slots=2, silent_s=31)
    assert adapters.cluster_capacity().slots == 2
    first, second = submit(vision, alice, ranks=2), submit(vision, alice, ranks=2)
    schedule_pass()
    assert [status(first), status(second)] == [JobStatus.ADMITTED, JobStatus.QUEUED]


def test_a_drained_node_shows_draining_until_it_holds_no_job(vision, alice):
    n1 = node("n1")
    job = submit(vision, alice, ranks=2)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, placement={"node": "n1"})
    _, asked = node_drain(node=n1, actor=alice, reason="disk")
    assert asked == [job.pk]
    schedule_pass()
    assert Node.objects.get(pk=n1.pk).state == NodeState.DRAINING  # its job still checkpoints
    # The supervisor stopped the run at a checkpoint; the job is back in the queue.
    Job.objects.filter(pk=job.pk).update(status=JobStatus.QUEUED, preempt_requested=False)
    schedule_pass()
    drained = Node.objects.get(pk=n1.pk)
    assert drained.state == NodeState.CORDONED
    assert drained.state_reason == "drained by alice: disk; no job left"
    assert status(job) == JobStatus.QUEUED  # and it is not placed back on the drained node


def test_the_nodes_message_tells_every_nodes_status(db, settings):
    settings.SYNCLANE_NODE_LOST_AFTER_S = 30
    node("n1")
    node("n2", silent_s=60)
    message = nodes_message()
    assert message["type"] == "nodes"
    assert {name: d["state"] for name, d in message["data"].items()} == {
        "n1": "ready",
        "n2": "lost",
    }


def test_a_placed_job_records_its_nodes_addresses_and_why_and_launches_on_its_nodes_queue(
    vision, alice, private_redis, django_capture_on_commit_callbacks
):
    n1 = node("n1", slots=2)
    Node.objects.filter(pk=n1.pk).update(address="10.0.0.1")
    job = submit(vision, alice, ranks=2)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass()
    placed = Job.objects.get(pk=job.pk)
    assert placed.status == JobStatus.ADMITTED
    assert placed.placement["nodes"] == [{"node": "n1", "ranks": [0, 1], "address": "10.0.0.1"}]
    assert placed.placement["why"].startswith("1 node: n1 ranks 0-1")
    # The launch waits in n1's own queue (no worker of this test consumes it).
    assert private_redis.llen("node.n1") == 1
    assert private_redis.llen("runs") == 0


def test_a_job_asking_for_labels_goes_to_a_node_that_has_them(vision, alice):
    node("n1", slots=4)
    h200 = node("n2", slots=4)
    Node.objects.filter(pk=h200.pk).update(labels={"gpu": "h200"})
    spec = JobSpec(
        name="picky", workload="tiny_gpt", world_size=2, steps=5, node_selector={"gpu": "h200"}
    )
    picky = job_submit(tenant=vision, spec=spec, actor=alice)
    schedule_pass()
    assert Job.objects.get(pk=picky.pk).node_names == ["n2"]
    node_cordon(node=h200, actor=alice)
    other = job_submit(tenant=vision, spec=spec, actor=alice)
    schedule_pass()
    waiting = Job.objects.get(pk=other.pk)
    assert (waiting.status, waiting.wait_code) == (JobStatus.QUEUED, "node_selector")


def test_the_job_page_says_where_each_rank_runs_and_why(client, vision, alice):
    job = submit(vision, alice, ranks=4)
    placement = {
        "nodes": [
            {"node": "n1", "address": "10.0.0.1", "ranks": [0, 1]},
            {"node": "n2", "address": "10.0.0.2", "ranks": [2, 3]},
        ],
        "why": "2 nodes: n1 ranks 0-1, n2 ranks 2-3; packed",
    }
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, placement=placement)
    client.force_login(alice)
    html = client.get(f"/jobs/{job.pk}/").text
    assert "<b>n1</b> (10.0.0.1): ranks 0–1" in html and "<b>n2</b> (10.0.0.2): ranks 2–3" in html
    assert "2 nodes: n1 ranks 0-1, n2 ranks 2-3; packed" in html


def test_node_links_come_from_spanning_jobs_rank_probes_in_one_query(
    vision, django_assert_num_queries
):
    from controlplane.telemetry.models import LinkState

    spread = [{"node": "n1", "ranks": [0, 1]}, {"node": "n2", "ranks": [2, 3]}]
    jobs = []
    for name, rate in (("a", 9e8), ("b", 6e8)):
        job = Job.objects.create(
            tenant=vision, queue=vision.queues.get(), name=name, workload="tiny_gpt",
            world_size=4, steps=5, status=JobStatus.RUNNING, placement={"nodes": spread},
        )  # fmt: skip
        LinkState.objects.create(
            job=job, src=1, dst=2, bandwidth_bps=rate, measured_at=timezone.now()
        )
        LinkState.objects.create(
            job=job, src=0, dst=1, state="degraded", measured_at=timezone.now()
        )
        jobs.append(job)
    one_node = Job.objects.create(
        tenant=vision, queue=vision.queues.get(), name="c", workload="tiny_gpt", world_size=2,
        steps=5, status=JobStatus.RUNNING, placement={"nodes": [{"node": "n1", "ranks": [0, 1]}]},
    )  # fmt: skip
    running = list(Job.objects.filter(pk__in=[j.pk for j in [*jobs, one_node]]))
    with django_assert_num_queries(1):
        links = adapters.node_links(running)
    # The same-node pair says nothing about n1-n2; the slower of the two jobs' measurements.
    assert [(link.a, link.b, link.bandwidth_bps, link.degraded) for link in links] == [
        ("n1", "n2", 6e8, False)
    ]
