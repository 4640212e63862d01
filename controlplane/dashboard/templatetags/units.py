"""Template filters for units: the core counts bandwidth in bit/s, pages show Mbit/s."""

from __future__ import annotations

from django import template

from controlplane.jobs.adapters import MBPS

register = template.Library()


@register.filter
def mbps(bps: float) -> float:
    """Bit/s as Mbit/s: ``{{ usage.bandwidth_bps|mbps|floatformat:1 }}``."""
    return float(bps) / MBPS
