"""Gang, topology-aware placement: examples (test_placement_properties.py has the properties)."""

from __future__ import annotations

import pytest

from controlplane.scheduling import (
    Cluster,
    Link,
    Node,
    Placement,
    Queues,
    Snapshot,
    WaitCode,
    allocate,
    place,
    schedule,
)
from controlplane.scheduling.placement import RankLink, Topology, Unplaced, links_from_ranks

from .factories import GBIT, job, running, tenant


def node(name: str, slots: int = 4, gbps: float = 10.0, **kw: object) -> Node:
    return Node(name=name, slots=slots, fabric_bps=gbps * GBIT, **kw)  # type: ignore[arg-type]


def placed(found: Placement | Unplaced) -> Placement:
    assert isinstance(found, Placement), found
    return found


def parts(found: Placement | Unplaced) -> list[tuple[str, list[int]]]:
    return [(p.node, list(p.ranks)) for p in placed(found).parts]


# --- one placement --------------------------------------------------------------------------


def test_a_job_that_fits_on_one_node_goes_to_the_tightest_one() -> None:
    nodes = [node("n1", 8), node("n2", 3), node("n3", 4)]
    found = place(job("j", "t", slots=3), nodes)
    assert parts(found) == [("n2", [0, 1, 2])]
    assert placed(found).why.startswith("1 node: n2 ranks 0-2; packed")
    assert not placed(found).spans


def test_a_job_too_large_for_any_node_spans_the_fewest_nodes() -> None:
    nodes = [node("n1", 2), node("n2", 2), node("n3", 6), node("n4", 1)]
    assert parts(place(job("j", "t", slots=7), nodes)) == [("n3", [0, 1, 2, 3, 4, 5]), ("n4", [6])]
    assert [p[0] for p in parts(place(job("j", "t", slots=9), nodes))] == ["n3", "n1", "n4"]


def test_a_spanning_job_numbers_its_ranks_in_the_nodes_address_order_as_torchrun_does() -> None:
    # The most free node takes the most ranks; torchrun's c10d rendezvous then numbers the
    # nodes by address as text, so "10.0.0.10" comes before "10.0.0.9".
    nodes = [node("big", 4, address="10.0.0.9"), node("small", 2, address="10.0.0.10")]
    found = place(job("j", "t", slots=6), nodes)
    assert parts(found) == [("small", [0, 1]), ("big", [2, 3, 4, 5])]
    assert placed(found).why.startswith("2 nodes: small ranks 0-1, big ranks 2-5; packed")


def test_the_issue_example_skips_a_node_with_a_degraded_link() -> None:
    nodes = [node("n1", 2), node("n2", 2), node("n3", 3)]
    found = place(job("j", "t", slots=4), nodes, [Link(a="n3", b="n1", degraded=True)])
    assert placed(found).why == (
        "2 nodes: n1 ranks 0-1, n2 ranks 2-3; packed, n3 skipped: link n1-n3 degraded"
    )


def test_fewest_nodes_wins_over_a_healthy_link() -> None:
    nodes = [node("n1", 2), node("n2", 2), node("n3", 1)]
    links = [Link(a="n1", b="n2", degraded=True)]
    assert [n for n, _ in parts(place(job("j", "t", slots=4), nodes, links))] == ["n1", "n2"]


def test_among_equal_choices_the_fastest_link_wins() -> None:
    nodes = [node("n1", 2), node("n2", 2), node("n3", 2)]
    links = [
        Link(a="n1", b="n2", bandwidth_bps=2 * GBIT),
        Link(a="n1", b="n3", bandwidth_bps=9 * GBIT),
        Link(a="n2", b="n3", bandwidth_bps=1 * GBIT),
    ]
    found = place(job("j", "t", slots=4), nodes, links)
    assert [n for n, _ in parts(found)] == ["n1", "n3"]
    assert placed(found).why.endswith("packed, n2 skipped: link n2-n3 slower (1 Gbit/s)")


def test_it_waits_for_all_ranks_at_once_never_a_part() -> None:
    nodes = [node("n1", 4), node("n2", 4)]
    holding = [running("r", "t", slots=3, placement=Placement.single("n1", 3))]
    found = place(job("j", "t", slots=6), nodes, running=holding)
    assert isinstance(found, Unplaced)
    assert found.code is WaitCode.CLUSTER_SLOTS
    assert found.reason == "needs 6 slots, schedulable nodes have 5 free (n2: 4, n1: 1)"


def test_it_honours_the_node_selector_and_names_the_label_it_lacks() -> None:
    nodes = [
        node("n1", 8),
        node("n2", 2, labels={"gpu": "h200"}),
        node("n3", 2, labels={"gpu": "h200"}),
    ]
    wanted = job("j", "t", slots=4, node_selector={"gpu": "h200"})
    assert [n for n, _ in parts(place(wanted, nodes))] == ["n2", "n3"]
    missing = place(job("j", "t", slots=1, node_selector={"gpu": "a100"}), nodes)
    assert isinstance(missing, Unplaced)
    assert (missing.code, missing.reason) == (WaitCode.NODE_SELECTOR, "no node with label gpu=a100")


def test_a_cordoned_node_takes_no_new_ranks() -> None:
    nodes = [node("n1", 8, schedulable=False), node("n2", 2)]
    assert parts(place(job("j", "t", slots=2), nodes)) == [("n2", [0, 1])]
    only = [node("n1", 8, labels={"gpu": "h200"}, schedulable=False)]
    found = place(job("j", "t", slots=1, node_selector={"gpu": "h200"}), only)
    assert isinstance(found, Unplaced)
    assert found.reason == "no schedulable node with label gpu=h200 (n1 cordoned)"


def test_a_spanning_job_needs_its_floor_on_each_node_a_local_one_none() -> None:
    nodes = [node("n1", 2, gbps=1), node("n2", 2, gbps=1), node("n3", 4, gbps=3)]
    holding = [
        running("s", "t", slots=2, bandwidth_floor_bps=0.5 * GBIT, placement=two("n2", "n3")),
        running(
            "l", "t", slots=1, bandwidth_floor_bps=5 * GBIT, placement=Placement.single("n3", 1)
        ),
    ]
    topology = Topology(nodes)
    for r in holding:
        topology.hold(r.id, r.placement, r.bandwidth_floor_bps)  # type: ignore[arg-type]
    assert topology.free_fabric_bps("n2") == pytest.approx(0.5 * GBIT)
    assert topology.free_fabric_bps("n3") == pytest.approx(2.5 * GBIT)  # the local job: none
    wide = job("j", "t", slots=3, bandwidth_floor_bps=GBIT)
    assert [n for n, _ in parts(place(wide, nodes, running=holding))] == ["n1", "n3"]
    wider = place(job("j", "t", slots=3, bandwidth_floor_bps=2 * GBIT), nodes, running=holding)
    assert isinstance(wider, Unplaced)
    assert wider.code is WaitCode.CLUSTER_BANDWIDTH


def two(a: str, b: str) -> Placement:
    return Placement.from_json([{"node": a, "ranks": [0]}, {"node": b, "ranks": [1]}])


# --- placements as data ----------------------------------------------------------------------


def test_a_placement_round_trips_through_its_json_shape() -> None:
    found = placed(place(job("j", "t", slots=5), [node("n1", 3), node("n2", 2)]))
    shape = found.to_json()
    assert shape == [{"node": "n1", "ranks": [0, 1, 2]}, {"node": "n2", "ranks": [3, 4]}]
    assert Placement.from_json(shape, found.why) == found


@pytest.mark.parametrize(
    "shape",
    [
        [{"node": "n1", "ranks": [0, 2]}],
        [{"node": "n1", "ranks": [1]}],
        [{"node": "n1", "ranks": [0]}, {"node": "n1", "ranks": [1]}],
        [{"node": "n1", "ranks": []}],
    ],
)
def test_a_placement_that_is_not_contiguous_ranks_from_zero_is_refused(shape: list) -> None:
    with pytest.raises(ValueError):
        Placement.from_json(shape)


def test_rank_probes_become_node_links() -> None:
    on = Placement.from_json([{"node": "n1", "ranks": [0, 1]}, {"node": "n2", "ranks": [2, 3]}])
    links = links_from_ranks(
        [
            RankLink(placement=on, src=0, dst=1, bandwidth_bps=1.0, degraded=True),  # one node
            RankLink(placement=on, src=0, dst=2, bandwidth_bps=9e8, degraded=False),
            RankLink(placement=on, src=1, dst=3, bandwidth_bps=7e8, degraded=True),
        ]
    )
    assert links == (Link(a="n1", b="n2", bandwidth_bps=7e8, degraded=True),)


# --- the admission core on a cluster with nodes ----------------------------------------------


def test_an_admission_carries_its_placement_and_the_next_job_sees_it() -> None:
    cluster = Cluster.from_nodes([node("n1", 4), node("n2", 4)])
    pending = [job("a", "t", slots=3, submit=0), job("b", "t", slots=3, submit=1)]
    decision = schedule(
        Snapshot(cluster=cluster, tenants=[tenant("t")], pending=pending, running=[]), 0.0
    )
    where = {a.job_id: a.placement.to_json() for a in decision.admissions if a.placement}
    assert where == {
        "a": [{"node": "n1", "ranks": [0, 1, 2]}],
        "b": [{"node": "n2", "ranks": [0, 1, 2]}],
    }


def test_slots_free_in_total_but_not_on_a_node_with_the_label_do_not_admit() -> None:
    cluster = Cluster.from_nodes([node("n1", 4, labels={"gpu": "h200"}), node("n2", 4)])
    holding = [running("r", "t", slots=3, placement=Placement.single("n1", 3))]
    wanted = job("j", "t", slots=2, node_selector={"gpu": "h200"})
    decision = schedule(
        Snapshot(cluster=cluster, tenants=[tenant("t")], pending=[wanted], running=holding), 0.0
    )
    assert decision.admissions == ()
    assert decision.waiting["j"].code is WaitCode.CLUSTER_SLOTS
    assert (
        "needs 2 slots, nodes with label gpu=h200 have 1 free (n1: 1)"
        in decision.waiting["j"].reason
    )


def test_preemption_takes_a_victim_on_the_node_the_job_needs() -> None:
    cluster = Cluster.from_nodes([node("n1", 4, labels={"gpu": "h200"}), node("n2", 4)])
    holding = [
        running(
            "on-n2", "t", slots=4, priority=100, started=2, placement=Placement.single("n2", 4)
        ),
        running(
            "on-n1", "t", slots=4, priority=100, started=1, placement=Placement.single("n1", 4)
        ),
    ]
    urgent = job("j", "t", slots=4, priority=300, node_selector={"gpu": "h200"})
    decision = schedule(
        Snapshot(cluster=cluster, tenants=[tenant("t")], pending=[urgent], running=holding), 10.0
    )
    # The newest victim would be on-n2, but only n1 carries the label.
    assert [p.job_id for p in decision.preemptions] == ["on-n1"]
    assert decision.admissions[0].placement.to_json() == [{"node": "n1", "ranks": [0, 1, 2, 3]}]  # type: ignore[union-attr]


def test_no_preemption_for_a_label_no_node_carries() -> None:
    cluster = Cluster.from_nodes([node("n1", 4)])
    holding = [running("r", "t", slots=4, priority=100, placement=Placement.single("n1", 4))]
    urgent = job("j", "t", slots=1, priority=400, node_selector={"gpu": "h200"})
    decision = schedule(
        Snapshot(cluster=cluster, tenants=[tenant("t")], pending=[urgent], running=holding), 10.0
    )
    assert decision.preemptions == ()
    assert decision.waiting["j"].code is WaitCode.NODE_SELECTOR


def test_a_pooled_cluster_cannot_honour_a_node_selector() -> None:
    decision = schedule(
        Snapshot(
            cluster=Cluster(slots=8, fabric_bps=GBIT),
            tenants=[tenant("t")],
            pending=[job("j", "t", node_selector={"gpu": "h200"}), job("k", "t")],
            running=[],
        ),
        0.0,
    )
    assert [a.job_id for a in decision.admissions] == ["k"]
    assert decision.admissions[0].placement is None
    assert decision.waiting["j"].code is WaitCode.NODE_SELECTOR


def test_a_cordon_keeps_running_jobs_and_sends_new_ones_elsewhere() -> None:
    nodes = [node("n1", 4), node("n2", 4)]
    queues = Queues(Cluster.from_nodes(nodes), [tenant("t")])
    queues.submit(job("a", "t", slots=2))
    assert [p.node for p in queues.decide(0.0).admissions[0].placement.parts] == ["n1"]  # type: ignore[union-attr]
    queues.resize(Cluster.from_nodes([node("n1", 4, schedulable=False), node("n2", 4)]))
    queues.submit(job("b", "t", slots=2))
    assert [p.node for p in queues.decide(1.0).admissions[0].placement.parts] == ["n2"]  # type: ignore[union-attr]
    queues.submit(job("c", "t", slots=3))
    outcome = queues.decide(2.0, explain=True)
    assert outcome.waiting["c"].code is WaitCode.CLUSTER_SLOTS  # n1's 2 free slots are cordoned
    queues.release("a")
    queues.resize(Cluster.from_nodes(nodes))
    assert [p.node for p in queues.decide(3.0).admissions[0].placement.parts] == ["n1"]  # type: ignore[union-attr]


# --- bandwidth per node ----------------------------------------------------------------------


def test_spanning_jobs_never_get_more_than_a_node_fabric_and_local_jobs_use_none() -> None:
    cluster = Cluster.from_nodes(
        [node("n1", 4, gbps=1), node("n2", 4, gbps=1), node("n3", 4, gbps=4)]
    )
    holding = [
        running("a", "t", slots=2, placement=two("n1", "n3")),
        running("b", "t", slots=2, priority=300, placement=two("n1", "n2")),
        running(
            "local",
            "t",
            slots=2,
            bandwidth_ceiling_bps=3 * GBIT,
            placement=Placement.single("n1", 2),
        ),
    ]
    shares = allocate(cluster=cluster, tenants=[tenant("t", gbps=100)], running=holding, now=0.0)
    assert shares["a"].bps + shares["b"].bps == pytest.approx(GBIT)  # n1 is the bottleneck
    assert shares["b"].bps == pytest.approx(1.5 * shares["a"].bps)  # by priority, 300 to 200
    assert shares["local"].bps == pytest.approx(3 * GBIT)  # its ceiling; n1's fabric is not used


def test_a_pooled_cluster_allocates_as_before() -> None:
    holding = [running("a", "t"), running("b", "t")]
    shares = allocate(
        cluster=Cluster(slots=8, fabric_bps=GBIT), tenants=[tenant("t")], running=holding, now=0.0
    )
    assert shares["a"].bps + shares["b"].bps == pytest.approx(GBIT)


def test_placements_held_on_a_pooled_cluster_count_once_it_has_nodes() -> None:
    queues = Queues(Cluster(slots=8, fabric_bps=GBIT), [tenant("t")])
    queues.hold(running("r", "t", slots=3, placement=Placement.single("n1", 3)))
    queues.resize(Cluster.from_nodes([node("n1", 4), node("n2", 2)]))
    queues.submit(job("j", "t", slots=3))  # n1 has 1 slot free, not 4
    assert [p.node for p in queues.decide(1.0).admissions[0].placement.parts] == ["n2", "n1"]  # type: ignore[union-attr]
