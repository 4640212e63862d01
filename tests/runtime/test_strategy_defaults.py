"""Defaults a strategy derives from the config and the optimizer (no process group needed)."""

from __future__ import annotations

import math

import pytest
import torch

from workers.runtime.config import RuntimeConfig
from workers.runtime.strategies import (
    DEFAULT_BUCKET_CAP_MB,
    bucket_cap_mb,
    local_step_scale,
)


def params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(3))]


@pytest.mark.parametrize(
    ("sync", "configured", "expected"),
    [
        ("full", None, DEFAULT_BUCKET_CAP_MB),
        ("localsgd", None, DEFAULT_BUCKET_CAP_MB),
        ("adaptive", None, DEFAULT_BUCKET_CAP_MB),
        ("adaptive", 2.0, 2.0),
        ("full", 0.25, 0.25),
    ],
)
def test_bucket_size_is_the_configured_one_else_the_strategys(
    sync: str, configured: float | None, expected: float
) -> None:
    assert bucket_cap_mb(RuntimeConfig(sync=sync, bucket_cap_mb=configured)) == expected


@pytest.mark.parametrize(
    ("optimizer", "world", "expected"),
    [
        (lambda ps: torch.optim.AdamW(ps), 4, 2.0),
        (lambda ps: torch.optim.Adam(ps), 2, math.sqrt(2)),
        (lambda ps: torch.optim.RMSprop(ps), 3, math.sqrt(3)),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 4, 1.0),
        (lambda ps: None, 4, 1.0),
    ],
)
def test_local_steps_are_scaled_by_sqrt_n_for_second_moment_optimizers(
    optimizer, world: int, expected: float
) -> None:
    cfg = RuntimeConfig(sync="adaptive")
    assert local_step_scale(cfg, optimizer(params()), world) == pytest.approx(expected)


def test_a_configured_local_step_scale_wins() -> None:
    cfg = RuntimeConfig(sync="adaptive", local_step_scale=1.0)
    assert local_step_scale(cfg, torch.optim.AdamW(params()), 4) == 1.0
