"""A worker host registers as a node from its environment, and a bad environment is refused."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pytest
from django.utils import timezone

from controlplane.jobs.choices import NodeState
from controlplane.jobs.models import Node
from controlplane.lib.env import EnvError, env_labels, env_name
from workers.supervisor import identity
from workers.supervisor.identity import NodeIdentity, detect_slots
from workers.supervisor.node import node_heartbeat


def _settings_error(**env: str) -> str:
    """Load the settings in a fresh interpreter with ``env``; return its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0, "the settings accepted a bad node environment"
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SYNCLANE_NODE_NAME": "bad name"}, "SYNCLANE_NODE_NAME='bad name' is not a name"),
        ({"SYNCLANE_NODE_SLOTS": "-1"}, "SYNCLANE_NODE_SLOTS=-1 must be 0 (detect) or more"),
        ({"SYNCLANE_NODE_SLOTS": "four"}, "SYNCLANE_NODE_SLOTS='four' is not an integer"),
        ({"SYNCLANE_NODE_LABELS": "gpu"}, "'gpu' is not key=value"),
        ({"SYNCLANE_NODE_FABRIC_MBPS": "-5"}, "SYNCLANE_NODE_FABRIC_MBPS=-5 must be 0 or more"),
        ({"SYNCLANE_NODE_ADDRESS": "10.0.0.1 10.0.0.2"}, "is not a host name or IP"),
        (
            {"SYNCLANE_NODE_LOST_AFTER_S": "soon"},
            "SYNCLANE_NODE_LOST_AFTER_S='soon' is not a number",
        ),
    ],
)
def test_a_bad_node_environment_stops_the_process_with_the_variable_named(env, message):
    assert message in _settings_error(**env)


def test_labels_parse_as_key_value_pairs(monkeypatch):
    monkeypatch.setenv("SYNCLANE_NODE_LABELS", " gpu=h200, zone=a ,rack=")
    assert env_labels("SYNCLANE_NODE_LABELS", {}) == {"gpu": "h200", "zone": "a", "rack": ""}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("gpu=h200,gpu=a100", "label 'gpu' is given twice"),
        ("=h200", "label key '' must be"),
        ("gpu=h 200", "value 'h 200' must be"),
    ],
)
def test_bad_labels_are_refused_with_the_reason(monkeypatch, raw, message):
    monkeypatch.setenv("SYNCLANE_NODE_LABELS", raw)
    with pytest.raises(EnvError, match=message):
        env_labels("SYNCLANE_NODE_LABELS", {})


def test_a_node_name_may_be_a_host_name(monkeypatch):
    monkeypatch.setenv("SYNCLANE_NODE_NAME", "gpu-07.rack2")
    assert env_name("SYNCLANE_NODE_NAME", "") == "gpu-07.rack2"


def test_slots_are_detected_as_cpu_cores_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        assert detect_slots() == torch.cuda.device_count()
    else:
        assert detect_slots() == len(os.sched_getaffinity(0))


def test_the_identity_comes_from_the_settings(settings):
    settings.SYNCLANE_NODE_NAME = "n7"
    settings.SYNCLANE_NODE_SLOTS = 3
    settings.SYNCLANE_NODE_ADDRESS = "10.1.2.3"
    settings.SYNCLANE_NODE_LABELS = {"gpu": "h200"}
    settings.SYNCLANE_NODE_FABRIC_MBPS = 400
    identity.this_node.cache_clear()
    try:
        me = identity.this_node()
    finally:
        identity.this_node.cache_clear()
    assert me == NodeIdentity(
        name="n7", slots=3, address="10.1.2.3", fabric_mbps=400, labels={"gpu": "h200"}
    )
    assert me.queue == "node.n7"


def test_a_heartbeat_registers_the_node_and_keeps_its_state(db):
    me = NodeIdentity(name="n1", slots=2, address="10.0.0.1", fabric_mbps=100, labels={"a": "b"})
    first = node_heartbeat(me)
    assert (first.slots, first.address, first.labels, first.state) == (
        2,
        "10.0.0.1",
        {"a": "b"},
        NodeState.READY,
    )
    assert first.registered_at is not None
    Node.objects.filter(pk=first.pk).update(state=NodeState.CORDONED)
    again = node_heartbeat(
        NodeIdentity(name="n1", slots=4, address="10.0.0.9", fabric_mbps=100, labels={})
    )
    assert (again.slots, again.address, again.labels) == (4, "10.0.0.9", {})
    assert again.state == NodeState.CORDONED  # a restarted worker does not undo a cordon
    assert again.registered_at == first.registered_at


def test_a_node_is_lost_after_the_configured_silence(db, settings):
    settings.SYNCLANE_NODE_LOST_AFTER_S = 30
    now = timezone.now()
    node = Node.objects.create(
        name="n1", slots=2, fabric_mbps=100, last_seen=now - dt.timedelta(seconds=29)
    )
    assert node.status(now) == NodeState.READY and node.schedulable(now)
    node.last_seen = now - dt.timedelta(seconds=31)
    assert node.status(now) == NodeState.LOST and not node.schedulable(now)
    node.state = NodeState.CORDONED
    assert node.status(now) == NodeState.LOST  # silence wins over the stored state
