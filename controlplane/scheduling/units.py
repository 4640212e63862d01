"""Numbers for people."""

from __future__ import annotations


def bandwidth(bps: float) -> str:
    """Format bit/s for people: "1.5 Gbit/s", "200 Mbit/s", "0 bit/s"."""
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bps) >= size:
            return f"{bps / size:.3g} {unit}"
    return f"{bps:.3g} bit/s"
