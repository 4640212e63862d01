"""Sync strategies behind ``wrap()``: ``full``, ``adaptive``, ``powersgd``, ``localsgd`` (+ ``none``).

``base`` holds what they share (and ``full``, ``none``), ``torch_hooks`` the peers built on
torch's hooks, ``adaptive`` our selective sync. ``build`` picks one from the config.
"""

from __future__ import annotations

import torch

from workers.runtime import protocol as p
from workers.runtime.config import RuntimeConfig
from workers.runtime.engine import CommEngine
from workers.runtime.reporter import Reporter
from workers.runtime.strategies import adaptive
from workers.runtime.strategies.adaptive import ADAPTIVE_BUCKET_CAP_MB, Adaptive, local_step_scale
from workers.runtime.strategies.base import (
    COL,
    COLUMNS,
    Full,
    NoComm,
    Strategy,
    table_period,
)
from workers.runtime.strategies.torch_hooks import LocalSGD, PowerSGD


def bucket_cap_mb(config: RuntimeConfig) -> float | None:
    """DDP's bucket size for ``config``: the configured one, else 1 MB for ``adaptive`` and
    None for the others: DDP's own default (25 MB, its first bucket 1 MB), so that ``full``
    sends the buckets plain DDP sends and sums them bit for bit as it does. Our 1 MB for
    every strategy, the rule before, made ``full`` 1.05-1.15x plain DDP's step with no link
    limit (bench_wrap) and was no faster where the link is the limit (bench_sync's arms).

    adaptive had 64 KB buckets, so that critical slices left while backward computed the
    layers below. Side by side once compute was fast (docs/benchmarks.md, arm adaptive-64k),
    1 MB was faster at 1 Gbit/s on four models of five and at 4 ranks, and within the
    run-to-run spread in the 2-rank seed regime; and on a large model 64 KB buckets would
    mean thousands of hook calls a step.
    """
    if config.bucket_cap_mb is not None:
        return config.bucket_cap_mb
    return ADAPTIVE_BUCKET_CAP_MB if config.sync == p.SYNC_ADAPTIVE else None


def broadcasts_buffers(sync: str) -> bool:
    """Whether DDP broadcasts rank 0's buffers at every forward under ``sync``: as DDP does
    for the strategies that keep every replica identical, not for ``none`` (which never
    communicates) nor ``adaptive`` (``adaptive.BROADCAST_BUFFERS``)."""
    if sync == p.SYNC_ADAPTIVE:
        return adaptive.BROADCAST_BUFFERS
    return sync != p.SYNC_NONE


def build(
    *,
    engine: CommEngine,
    config: RuntimeConfig,
    reporter: Reporter | None,
    optimizer: torch.optim.Optimizer | None,
    background: CommEngine | None = None,
) -> Strategy:
    """Return the strategy ``config.sync`` names (``background``: adaptive's averaging lane)."""
    if config.sync == p.SYNC_ADAPTIVE:
        return Adaptive(
            engine=engine,
            config=config,
            reporter=reporter,
            optimizer=optimizer,
            background=background,
        )
    classes: dict[str, type[Strategy]] = {
        p.SYNC_FULL: Full,
        p.SYNC_POWERSGD: PowerSGD,
        p.SYNC_LOCALSGD: LocalSGD,
        p.SYNC_NONE: NoComm,
    }
    return classes[config.sync](engine=engine, config=config)


__all__ = [
    "COL",
    "COLUMNS",
    "Adaptive",
    "Full",
    "LocalSGD",
    "NoComm",
    "PowerSGD",
    "Strategy",
    "broadcasts_buffers",
    "bucket_cap_mb",
    "build",
    "table_period",
    "local_step_scale",
]
