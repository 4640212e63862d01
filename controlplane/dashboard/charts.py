"""Chart data for pages: stored samples -> series the page's Plotly figure starts from."""

from __future__ import annotations

from typing import Any

from controlplane.jobs.models import Job

# Metric fields drawn on the job page, in order.
SERIES = ("loss", "val_loss", "samples_per_s", "tokens_per_s")
MAX_POINTS = 2000


def metrics_history(job: Job, *, max_points: int = MAX_POINTS) -> dict[str, list[Any]]:
    """Return {"step": [...], <metric>: [...]} from the job's stored samples.

    Missing values are None (Plotly leaves a gap). At most ``max_points`` of the
    latest samples are returned.
    """
    samples = list(job.samples.order_by("-step", "-id").values_list("step", "data")[:max_points])
    samples.reverse()
    history: dict[str, list[Any]] = {"step": [step for step, _ in samples]}
    for name in SERIES:
        history[name] = [data.get(name) for _, data in samples]
    return history
