"""Fault injector: make one rank's link slow on purpose, for tests and demos.

A spec is a comma-separated list of ``key=value`` (env ``SYNCLANE_FAULT`` or
``RuntimeConfig(fault=...)``)::

    rank=1,from_step=5,delay_s=0.3            # rank 1 adds 0.3 s to each collective from step 5
    rank=0,from_step=0,bandwidth_factor=0.1   # rank 0's link runs at 10% of its rate
    rank=1,from_step=5,until_step=9,delay_s=0.3
    rank=1,from_step=4,until_step=5,delay_s=0.06,blip=1   # a blip: a re-issued probe is fast

Keys: ``rank`` (default 0), ``from_step`` (default 0), ``until_step`` (exclusive, default
never), ``delay_s`` (extra seconds per collective), ``bandwidth_factor`` (0 < f <= 1, scales
the throttle's rate), ``blip`` (1: the delay hits only a transfer's first attempt, so a
re-issued transfer goes through: a link probe, or a gradient chunk on a degraded link).
At least one of ``delay_s``/``bandwidth_factor`` must be given.
Stdlib only, so config validation can parse it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

_KEYS = ("rank", "from_step", "until_step", "delay_s", "bandwidth_factor", "blip")


@dataclass(frozen=True, kw_only=True)
class FaultSpec:
    """One injected fault; ``active(rank, step)`` says whether it applies now."""

    rank: int = 0
    from_step: int = 0
    until_step: int | None = None
    delay_s: float = 0.0
    bandwidth_factor: float = 1.0
    blip: bool = False

    def __post_init__(self) -> None:
        if self.rank < 0 or self.from_step < 0:
            raise ValueError("fault rank and from_step must be >= 0")
        if self.until_step is not None and self.until_step <= self.from_step:
            raise ValueError("fault until_step must be > from_step")
        if self.delay_s < 0:
            raise ValueError("fault delay_s must be >= 0")
        if not 0 < self.bandwidth_factor <= 1:
            raise ValueError("fault bandwidth_factor must be in (0, 1]")
        if self.delay_s == 0 and self.bandwidth_factor == 1:
            raise ValueError("fault needs delay_s > 0 or bandwidth_factor < 1")

    def active(self, rank: int, step: int) -> bool:
        """Return True when this fault hits ``rank`` at ``step``."""
        if rank != self.rank or step < self.from_step:
            return False
        return self.until_step is None or step < self.until_step

    def delays(self, rank: int, step: int) -> tuple[float, float]:
        """Return the extra seconds for a transfer's first attempt and for its re-issue."""
        if self.delay_s <= 0 or not self.active(rank, step):
            return 0.0, 0.0
        return self.delay_s, 0.0 if self.blip else self.delay_s

    @classmethod
    def parse(cls, spec: str) -> FaultSpec:
        """Parse ``key=value,...``; raise ValueError naming the bad part."""
        ints: dict[str, int | None] = {}
        floats: dict[str, float] = {}
        for part in filter(None, (s.strip() for s in spec.split(","))):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or key not in _KEYS:
                raise ValueError(f"bad fault spec part {part!r}; keys are {', '.join(_KEYS)}")
            try:
                if key in ("rank", "from_step", "until_step", "blip"):
                    ints[key] = int(raw)
                else:
                    floats[key] = float(raw)
            except ValueError:
                raise ValueError(f"bad number in fault spec part {part!r}") from None
        return cls(
            rank=ints.get("rank") or 0,
            from_step=ints.get("from_step") or 0,
            until_step=ints.get("until_step"),
            delay_s=floats.get("delay_s", 0.0),
            bandwidth_factor=floats.get("bandwidth_factor", 1.0),
            blip=bool(ints.get("blip")),
        )
