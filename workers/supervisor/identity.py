"""This host as a node: its name, slots, labels, address and fabric, from the settings.

Reads only settings (and torch, once, to count GPUs), so the Celery app can ask for the
node's queue before Django's models are loaded.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass, field

from django.conf import settings

from controlplane.jobs.choices import node_queue


@dataclass(frozen=True, kw_only=True)
class NodeIdentity:
    """What a worker registers for its host (validated by the settings' env helpers)."""

    name: str
    slots: int
    address: str
    fabric_mbps: int
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"node {self.name}: slots must be at least 1, not {self.slots}")

    @property
    def queue(self) -> str:
        return node_queue(self.name)


def detect_slots() -> int:
    """The GPUs torch sees if there are any, else the CPU cores this process may use."""
    try:
        import torch
    except ImportError:  # a worker host without torch still runs control tasks
        torch = None  # type: ignore[assignment]
    if torch is not None and torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return int(torch.cuda.device_count())
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def node_name() -> str:
    """SYNCLANE_NODE_NAME, else this host's name."""
    return str(settings.SYNCLANE_NODE_NAME or socket.gethostname())


@functools.cache
def this_node() -> NodeIdentity:
    """This host's identity (slots are detected once per process when not set)."""
    name = node_name()
    return NodeIdentity(
        name=name,
        slots=int(settings.SYNCLANE_NODE_SLOTS) or detect_slots(),
        address=str(settings.SYNCLANE_NODE_ADDRESS or socket.gethostname()),
        fabric_mbps=int(settings.SYNCLANE_NODE_FABRIC_MBPS),
        labels=dict(settings.SYNCLANE_NODE_LABELS),
    )
