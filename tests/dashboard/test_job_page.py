"""The job page and its JSON history: what it shows, and to whom."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from controlplane.jobs.choices import JobStatus, PriorityClass
from controlplane.jobs.models import Job
from controlplane.telemetry.models import Alarm, LinkState, MetricSample

from .conftest import client_for

pytestmark = pytest.mark.django_db


def add_samples(job, steps, **extra):
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(
            job=job,
            step=s,
            reported_at=now,
            data={
                "step": s,
                "loss": 4 - s / 100,
                "step_time_s": 0.2,
                "comm_time_s": 0.05,
                "drift": 0.01 * s,
                **extra,
            },
        )
        for s in steps
    )


def test_a_member_sees_every_chart_the_alarm_list_and_the_heatmap(client, alice, visions_job):
    add_samples(visions_job, range(1, 11))
    LinkState.objects.create(
        job=visions_job,
        src=0,
        dst=1,
        bandwidth_bps=8e8,
        state="degraded",
        measured_at=timezone.now(),
    )
    Alarm.objects.create(
        job=visions_job,
        kind="sync_drift",
        step=4,
        value=0.2,
        threshold=0.05,
        raised_at=timezone.now(),
    )

    response = client_for(client, alice).get(reverse("job-detail", args=[visions_job.pk]))

    assert response.status_code == 200
    for element in (
        "chart-loss",
        "chart-throughput",
        "chart-time",
        "chart-bandwidth",
        "chart-heatmap",
        "chart-drift",
        "alarm-rows",
    ):
        assert f'id="{element}"' in response.text
    figures = response.context["figures"]
    assert figures["loss"]["data"][0]["x"] == list(range(1, 11))
    assert figures["heatmap"]["data"][0]["z"][0][1] == 1
    assert figures["drift"]["meta"]["threshold"] == 0.05
    assert figures["drift"]["meta"]["periods"] == [[4, None]]
    assert response.context["history"]["alarms"][0]["kind"] == "sync_drift"


def test_a_reissued_pair_is_marked_on_the_page_and_in_its_history(client, alice, visions_job):
    for src, dst, reissued in ((0, 1, True), (1, 0, False)):
        LinkState.objects.create(
            job=visions_job,
            src=src,
            dst=dst,
            bandwidth_bps=8e8,
            reissued=reissued,
            measured_at=timezone.now(),
        )
    client_for(client, alice)

    response = client.get(reverse("job-detail", args=[visions_job.pk]))

    assert response.context["history"]["links"]["reissued"] == [[None, True], [False, None]]
    heatmap = response.context["figures"]["heatmap"]
    assert heatmap["data"][0]["text"] == [["", "800 ↻"], ["800", ""]]
    assert 'id="reissued-key" title=' in response.text  # the key shows: it applies
    history = client.get(reverse("job-history", args=[visions_job.pk])).json()
    assert history["links"]["reissued"] == [[None, True], [False, None]]


def test_a_link_stored_without_reissued_reads_as_measured_once(client, alice, visions_job):
    LinkState.objects.create(job=visions_job, src=0, dst=1, measured_at=timezone.now())

    response = client_for(client, alice).get(reverse("job-detail", args=[visions_job.pk]))

    assert response.context["history"]["links"]["reissued"] == [[None, False], [False, None]]
    assert response.context["figures"]["heatmap"]["meta"]["reissued"] == 0
    assert 'id="reissued-key" hidden' in response.text


def test_another_tenants_member_gets_404_for_the_page_and_its_history(client, bob, visions_job):
    client_for(client, bob)
    assert client.get(reverse("job-detail", args=[visions_job.pk])).status_code == 404
    assert client.get(reverse("job-history", args=[visions_job.pk])).status_code == 404


def test_history_after_a_step_returns_only_the_gap(client, alice, visions_job):
    add_samples(visions_job, range(1, 21))
    body = (
        client_for(client, alice)
        .get(reverse("job-history", args=[visions_job.pk]), {"after_step": 15})
        .json()
    )
    assert body["metrics"]["loss"]["x"] == [16, 17, 18, 19, 20]
    assert body["last_step"] == 20
    assert body["metrics"]["compute_time_s"]["y"][0] == pytest.approx(0.15)


def test_history_is_downsampled_to_a_bounded_number_of_points(client, alice, visions_job):
    add_samples(visions_job, range(1, 5001))
    body = client_for(client, alice).get(reverse("job-history", args=[visions_job.pk])).json()
    assert 100 < len(body["metrics"]["loss"]["x"]) <= 1000


def test_the_tenant_admin_changes_priority(client, alice, visions_job):
    client_for(client, alice).post(
        reverse("job-priority", args=[visions_job.pk]), {"priority": PriorityClass.HIGH}
    )
    visions_job.refresh_from_db()
    assert visions_job.priority == PriorityClass.HIGH
    assert "Change priority" in client.get(reverse("job-detail", args=[visions_job.pk])).text


def test_a_viewer_can_neither_change_priority_nor_see_the_form(client, charlie, visions_job):
    client_for(client, charlie)
    page = client.get(reverse("job-detail", args=[visions_job.pk]))
    assert "Change priority" not in page.text and "Cancel job" not in page.text
    response = client.post(
        reverse("job-priority", args=[visions_job.pk]), {"priority": PriorityClass.HIGH}
    )
    assert response.status_code == 404
    visions_job.refresh_from_db()
    assert visions_job.priority == PriorityClass.NORMAL


def test_the_log_panel_offers_every_rank_and_torchrun(client, alice, visions_job):
    """The lines themselves arrive over the job's websocket (tests/telemetry/test_consumer_logs)."""
    page = client_for(client, alice).get(reverse("job-detail", args=[visions_job.pk])).text
    options = re.findall(r'<option value="([^"]+)">', page.split('id="log-source"')[1])
    assert options[:3] == ["0", "1", "torchrun"]
    assert 'id="log-view"' in page and "logs-refresh" not in page


def test_a_run_across_nodes_offers_each_node_s_torchrun_log(client, alice, visions_job):
    nodes = [{"node": "n1", "ranks": [0, 1]}, {"node": "n2", "ranks": [2, 3]}]
    Job.objects.filter(pk=visions_job.pk).update(world_size=4, placement={"nodes": nodes})
    page = client_for(client, alice).get(reverse("job-detail", args=[visions_job.pk])).text
    panel = page.split('id="log-source"')[1].split("</select>")[0]
    options = re.findall(r'<option value="([^"]+)">([^<]+)</option>', panel)
    assert options == [
        ("0", "0"), ("1", "1"), ("2", "2"), ("3", "3"),
        ("torchrun", "torchrun n1"), ("torchrun.node1", "torchrun n2"),
    ]  # fmt: skip


def test_a_job_that_reported_no_metrics_shows_it_with_exit_status_and_wall_time(
    client, alice, visions_job
):
    started = timezone.now() - dt.timedelta(seconds=42)
    Job.objects.filter(pk=visions_job.pk).update(
        status=JobStatus.SUCCEEDED,
        started_at=started,
        finished_at=started + dt.timedelta(seconds=42),
        exit_code=0,
        exit_reason="finished",
    )
    page = client_for(client, alice).get(reverse("job-detail", args=[visions_job.pk])).text
    assert "No metrics were reported" in page
    assert re.search(r'id="job-exit">0 · finished<', page)
    assert re.search(r'id="job-wall">42 s<', page)


def test_a_job_with_metrics_has_no_such_notice(client, alice, visions_job):
    MetricSample.objects.create(
        job=visions_job, step=1, reported_at=timezone.now(), data={"loss": 2.0}
    )
    page = client_for(client, alice).get(reverse("job-detail", args=[visions_job.pk])).text
    assert 'id="no-metrics"' not in page


def test_the_eta_follows_the_pace_so_far(client, alice, visions_job):
    from controlplane.dashboard.history import eta_seconds

    visions_job.status, visions_job.last_step = "running", 10
    visions_job.started_at = timezone.now() - dt.timedelta(seconds=20)
    assert eta_seconds(visions_job) == pytest.approx(80, abs=2)
