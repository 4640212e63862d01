"""A run across nodes: each node's torchrun logs to ``logs/node<i>/``; ranks are read globally.

2 nodes x 2 ranks: global ranks 0-1 are node 0's local ranks 0-1, global ranks 2-3 node 1's.
A run on one node keeps ``logs/<run id>/attempt_<n>/<rank>/`` (test_log_follower.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controlplane.jobs.placement import ranks_per_node, torchrun_stream
from controlplane.telemetry.logs import LogFollower, locate, log_path, logs_dir, torchrun_log
from tests.telemetry.test_log_follower import append, rank_log

TWO_BY_TWO = (2, 2)
PLACEMENT = {
    "nodes": [
        {"node": "n1", "address": "10.0.0.1", "ranks": [0, 1]},
        {"node": "n2", "address": "10.0.0.2", "ranks": [2, 3]},
    ],
    "why": "placed by the test",
}


def node_log(
    run: Path, node: int, local: int, stream: str = "stdout", attempt: int = 0, run_id="r1"
) -> Path:
    """A rank's log as node rank ``node``'s torchrun writes it (``--log-dir=logs/node<i>``)."""
    folder = run / "logs" / f"node{node}" / f"synclane-7-1-{run_id}_ab" / f"attempt_{attempt}"
    path = folder / str(local) / f"{stream}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def two_nodes(run: Path) -> dict[int, Path]:
    """Global rank -> its stdout, each saying which node and local rank wrote it."""
    paths = {}
    for node in (0, 1):
        for local in (0, 1):
            path = node_log(run, node, local)
            append(path, f"node {node} local {local}")
            paths[2 * node + local] = path
    return paths


def test_the_placement_gives_the_ranks_of_each_node_in_node_rank_order() -> None:
    assert ranks_per_node(PLACEMENT) == TWO_BY_TWO
    three = {"nodes": [{"node": "a", "ranks": [0, 1, 2]}, {"node": "b", "ranks": [3]}]}
    assert ranks_per_node(three) == (3, 1)
    # One node (or none yet) is the layout of a run on one node.
    assert ranks_per_node({"nodes": [{"node": "n1", "ranks": [0, 1]}]}) == ()
    assert ranks_per_node({"node": "n1", "ranks": 2}) == ()
    assert ranks_per_node({}) == () and ranks_per_node(None) == ()


@pytest.mark.parametrize(
    ("rank", "nodes", "where"),
    [
        (0, TWO_BY_TWO, (0, 0)),
        (1, TWO_BY_TWO, (0, 1)),
        (2, TWO_BY_TWO, (1, 0)),
        (3, TWO_BY_TWO, (1, 1)),
        (4, TWO_BY_TWO, None),
        (3, (3, 1), (1, 0)),
        (5, (), (0, 5)),  # one node: the rank is its local rank
    ],
)
def test_a_global_rank_is_a_local_rank_of_one_node(rank, nodes, where) -> None:
    assert locate(rank, nodes) == where


def test_each_global_rank_reads_the_node_that_runs_it(tmp_path: Path) -> None:
    paths = two_nodes(tmp_path)
    for rank, path in paths.items():
        assert log_path(tmp_path, rank=rank, stream="stdout", nodes=TWO_BY_TWO) == path
    found = log_path(tmp_path, rank=2, stream="stdout", nodes=TWO_BY_TWO)
    assert found is not None and found.read_text() == "node 1 local 0\n"
    assert log_path(tmp_path, rank=3, stream="stderr", nodes=TWO_BY_TWO) == paths[3].with_name(
        "stderr.log"
    )
    assert log_path(tmp_path, rank=4, stream="stdout", nodes=TWO_BY_TWO) is None


def test_the_torchrun_stream_is_the_output_of_the_node_of_the_rank(tmp_path: Path) -> None:
    for rank in (0, 1):
        path = log_path(tmp_path, rank=rank, stream="torchrun", nodes=TWO_BY_TWO)
        assert path == tmp_path / "torchrun.log"
    for rank in (2, 3):
        path = log_path(tmp_path, rank=rank, stream="torchrun", nodes=TWO_BY_TWO)
        assert path == tmp_path / "torchrun.node1.log"
    assert log_path(tmp_path, rank=4, stream="torchrun", nodes=TWO_BY_TWO) is None
    # One node: one torchrun log, whatever the rank (as before runs spanned nodes).
    assert log_path(tmp_path, rank=3, stream="torchrun") == tmp_path / "torchrun.log"
    assert [torchrun_stream(i) for i in range(3)] == [
        "torchrun",
        "torchrun.node1",
        "torchrun.node2",
    ]
    assert torchrun_log(tmp_path, 2) == tmp_path / "torchrun.node2.log"


def test_each_node_s_newest_attempt_counts_on_its_own(tmp_path: Path) -> None:
    """A node's newer attempt hides neither the other node's ranks nor its own older folder's."""
    two_nodes(tmp_path)
    newer = node_log(tmp_path, 1, 0, attempt=1)
    append(newer, "node 1 attempt 1")
    assert log_path(tmp_path, rank=2, stream="stdout", nodes=TWO_BY_TWO) == newer
    rank0 = log_path(tmp_path, rank=0, stream="stdout", nodes=TWO_BY_TWO)
    assert rank0 is not None and rank0.read_text() == "node 0 local 0\n"


def test_one_node_keeps_its_flat_folder_and_ignores_node_folders(tmp_path: Path) -> None:
    """A job that ran across nodes and runs on one node now reads its new flat folder only."""
    two_nodes(tmp_path)
    flat = rank_log(tmp_path, 1)
    append(flat, "one node")
    assert logs_dir(tmp_path) == tmp_path / "logs"
    assert logs_dir(tmp_path, 1, TWO_BY_TWO) == tmp_path / "logs" / "node1"
    assert log_path(tmp_path, rank=1, stream="stdout") == flat
    chunks = LogFollower(tmp_path).poll()
    assert [(c.rank, c.lines) for c in chunks] == [("1", ["one node"])]


def test_the_follower_sends_every_rank_by_global_rank_and_each_node_s_torchrun(
    tmp_path: Path,
) -> None:
    two_nodes(tmp_path)
    append(node_log(tmp_path, 1, 1, "stderr"), "Traceback (most recent call last):")
    append(tmp_path / "torchrun.log", "node 0 agent")
    append(tmp_path / "torchrun.node1.log", "node 1 agent")
    follower = LogFollower(tmp_path, nodes=TWO_BY_TWO)
    chunks = follower.poll()
    assert [(c.rank, c.stream, c.lines) for c in chunks] == [
        ("0", "stdout", ["node 0 local 0"]),
        ("1", "stdout", ["node 0 local 1"]),
        ("2", "stdout", ["node 1 local 0"]),
        ("3", "stdout", ["node 1 local 1"]),
        ("3", "stderr", ["Traceback (most recent call last):"]),
        ("torchrun", "torchrun", ["node 0 agent"]),
        ("torchrun.node1", "torchrun", ["node 1 agent"]),
    ]
    assert chunks[2].attempt == "attempt_0"
    append(node_log(tmp_path, 1, 0), "later")
    assert [(c.rank, c.lines) for c in follower.poll()] == [("2", ["later"])]


def test_the_follower_follows_a_new_placement(tmp_path: Path) -> None:
    """Ranks of an attempt beyond a node's share now (an earlier placement's) are left out."""
    two_nodes(tmp_path)
    follower = LogFollower(tmp_path, nodes=(1, 1))  # readmitted as 1 + 1
    assert [(c.rank, c.lines) for c in follower.poll()] == [
        ("0", ["node 0 local 0"]),
        ("1", ["node 1 local 0"]),
    ]
    follower.nodes = TWO_BY_TWO
    assert [(c.rank, c.lines) for c in follower.poll()] == [
        ("1", ["node 0 local 1"]),
        ("3", ["node 1 local 1"]),
    ]


def test_a_node_that_has_not_started_yet_leaves_its_ranks_empty(tmp_path: Path) -> None:
    append(node_log(tmp_path, 0, 1), "only node 0")
    assert log_path(tmp_path, rank=2, stream="stdout", nodes=TWO_BY_TWO) is None
    chunks = LogFollower(tmp_path, nodes=TWO_BY_TWO).poll()
    assert [(c.rank, c.lines) for c in chunks] == [("1", ["only node 0"])]


def test_the_newest_attempt_of_a_node_is_the_one_written_last(tmp_path: Path) -> None:
    old = node_log(tmp_path, 1, 0, run_id="r1")
    new = node_log(tmp_path, 1, 0, run_id="r2")
    os.utime(old.parent.parent, (1, 1))
    assert log_path(tmp_path, rank=2, stream="stdout", nodes=TWO_BY_TWO) == new
