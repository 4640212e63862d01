"""Defaults a strategy derives from the config and the optimizer (no process group needed)."""

from __future__ import annotations

import pytest
import torch

from workers.runtime.config import RuntimeConfig
from workers.runtime.engine import BACKGROUND_CHUNK_BYTES, FUSE_BYTES, MAX_CHUNK_BYTES
from workers.runtime.strategies import (
    bucket_cap_mb,
    local_step_scale,
    table_period,
)
from workers.runtime.strategies.adaptive import (
    BACKGROUND_CHUNK_S,
    CRITICAL_FUSE_S,
    critical_fuse_bytes,
    lane_chunk_bytes,
    relaid,
)
from workers.runtime.strategies.base import MAX_TABLE_PERIOD


def params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(3))]


@pytest.mark.parametrize(
    ("sync", "configured", "expected"),
    [
        # None: DDP's own default (25 MB, a 1 MB first bucket), as plain DDP.
        ("full", None, None),
        ("powersgd", None, None),
        ("localsgd", None, None),
        ("none", None, None),
        ("adaptive", None, 1.0),
        ("adaptive", 2.0, 2.0),
        ("full", 0.25, 0.25),
    ],
)
def test_bucket_size_is_the_configured_one_else_the_strategys(
    sync: str, configured: float | None, expected: float | None
) -> None:
    assert bucket_cap_mb(RuntimeConfig(sync=sync, bucket_cap_mb=configured)) == expected


@pytest.mark.parametrize(
    ("optimizer", "world", "expected"),
    [
        (lambda ps: torch.optim.AdamW(ps), 4, 3.0314),
        (lambda ps: torch.optim.Adam(ps), 2, 1.7411),
        (lambda ps: torch.optim.RMSprop(ps), 3, 2.4082),
        (lambda ps: torch.optim.AdamW(ps), 1, 1.0),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 4, 1.0),
        (lambda ps: None, 4, 1.0),
    ],
)
def test_local_steps_are_scaled_by_n_to_the_0_8_for_second_moment_optimizers(
    optimizer, world: int, expected: float
) -> None:
    cfg = RuntimeConfig(sync="adaptive")
    assert local_step_scale(cfg, optimizer(params()), world) == pytest.approx(expected, abs=1e-4)


def test_a_configured_local_step_scale_wins() -> None:
    cfg = RuntimeConfig(sync="adaptive", local_step_scale=1.0)
    assert local_step_scale(cfg, torch.optim.AdamW(params()), 4) == 1.0


@pytest.mark.parametrize(
    ("mbps", "world", "expected"),
    [
        (None, 2, None),  # no known rate: the lane's default
        (1000.0, 1, None),  # one rank sends nothing
        (100.0, 2, BACKGROUND_CHUNK_BYTES),  # 5 ms are 62.5 KB: the default is the floor
        (1150.0, 2, 718_750),  # 5 ms of 143.75 MB/s; a ring of 2 sends the payload once
        (1150.0, 4, 479_166),  # a ring of 4 sends 1.5x the payload
        (1e6, 2, MAX_CHUNK_BYTES),
    ],
)
def test_the_lanes_chunks_are_a_few_ms_of_the_agreed_link(
    mbps: float | None, world: int, expected: int | None
) -> None:
    rate = None if mbps is None else mbps * 1e6 / 8
    assert BACKGROUND_CHUNK_S == 0.005
    assert lane_chunk_bytes(rate, world) == expected


@pytest.mark.parametrize(
    ("mbps", "world", "expected"),
    [
        (None, 2, FUSE_BYTES),  # no known rate: the engine's fixed size
        (1000.0, 1, FUSE_BYTES),  # one rank sends nothing
        (50.0, 2, FUSE_BYTES),  # 2 ms are 12.5 KB: the fixed size is the floor
        (1200.0, 2, 300_000),  # 2 ms of 150 MB/s; a ring of 2 sends the payload once
        (1200.0, 4, 200_000),  # a ring of 4 sends 1.5x the payload
        (1e7, 2, MAX_CHUNK_BYTES),
    ],
)
def test_critical_slices_are_fused_up_to_a_few_ms_of_the_agreed_link(
    mbps: float | None, world: int, expected: int
) -> None:
    rate = None if mbps is None else mbps * 1e6 / 8
    assert CRITICAL_FUSE_S == 0.002
    assert critical_fuse_bytes(rate, world) == expected


def test_the_averages_residual_keeps_each_parameters_part_when_the_set_changes() -> None:
    residual = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    old = [("a", 2), ("b", 3), ("c", 1)]
    # "b" promoted (gone), "d" demoted (back, from zero), "a" and "c" keep their values.
    new = [("a", 2), ("c", 1), ("d", 2)]
    assert relaid(residual, old, new).tolist() == [1.0, 2.0, 6.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("step_time_s", "interval_s", "alarmed", "expected"),
    [
        (0.004, 0.02, False, 5),  # 5 steps of 4 ms make the 20 ms
        (0.007, 0.02, False, 3),  # 21 ms: the first step past the interval
        (0.02, 0.02, False, 1),  # steps as long as the interval: a table after each
        (0.5, 0.02, False, 1),
        (0.0001, 0.02, False, MAX_TABLE_PERIOD),  # capped: the link monitor stays near
        (0.004, 0.02, True, 1),  # link_degraded raised: every step
        (0.0, 0.02, False, 1),  # no step time agreed yet
        (0.004, 0.0, False, 1),  # interval 0: every step (and under deterministic)
    ],
)
def test_a_table_is_agreed_per_interval_of_step_time_and_every_step_on_a_degraded_link(
    step_time_s: float, interval_s: float, alarmed: bool, expected: int
) -> None:
    assert table_period(step_time_s, interval_s, alarmed=alarmed) == expected
