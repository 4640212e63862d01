"""A job's metric history, links and logs; alarms listed, filtered and acknowledged."""

from __future__ import annotations

from django.utils import timezone

from controlplane.telemetry.models import Alarm, LinkState, MetricSample

from .conftest import make_job


def add_samples(job, steps):
    for step in steps:
        MetricSample.objects.create(
            job=job, step=step, reported_at=timezone.now(), data={"loss": 10.0 / step}
        )


def test_metric_history_is_downsampled_and_backfills_after_a_step(as_user, alice, vision):
    job = make_job(vision)
    add_samples(job, range(1, 101))
    client = as_user(alice)
    whole = client.get(f"/api/v1/jobs/{job.pk}/metrics/?max_points=10").json()
    assert whole["last_step"] == 100
    assert 2 <= len(whole["metrics"]["loss"]["x"]) <= 10
    after = client.get(f"/api/v1/jobs/{job.pk}/metrics/?after_step=95").json()
    assert after["metrics"]["loss"]["x"] == [96, 97, 98, 99, 100]


def test_a_negative_after_step_is_a_400(as_user, alice, vision):
    job = make_job(vision)
    response = as_user(alice).get(f"/api/v1/jobs/{job.pk}/metrics/?after_step=-1")
    assert response.status_code == 400
    assert "after_step" in response.json()


def test_links_list_the_latest_state_of_each_pair(as_user, alice, vision):
    job = make_job(vision)
    LinkState.objects.create(job=job, src=0, dst=1, state="degraded", measured_at=timezone.now())
    links = as_user(alice).get(f"/api/v1/jobs/{job.pk}/links/").json()
    assert [(link["src"], link["dst"], link["state"]) for link in links] == [(0, 1, "degraded")]


def write_rank_log(job, rank: int, text: str):
    folder = job.run_dir / "logs" / "run_x" / "attempt_0" / str(rank)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.log").write_text(text)
    return folder / "stdout.log"


def test_logs_give_a_ranks_tail_then_what_follows_an_offset(
    as_user, alice, vision, settings, tmp_path
):
    settings.SYNCLANE_JOBS_DIR = tmp_path
    job = make_job(vision)
    path = write_rank_log(job, 1, "".join(f"line {i}\n" for i in range(10)))
    client = as_user(alice)
    tail = client.get(f"/api/v1/jobs/{job.pk}/logs/?rank=1&lines=3").json()
    assert tail["lines"] == ["line 7", "line 8", "line 9"]
    with path.open("a") as f:
        f.write("line 10\npartial")
    more = client.get(f"/api/v1/jobs/{job.pk}/logs/?rank=1&after={tail['offset']}").json()
    assert more["lines"] == ["line 10"]
    assert more["offset"] == tail["offset"] + len("line 10\n")


def test_logs_of_a_job_that_has_not_run_are_empty(as_user, alice, vision, settings, tmp_path):
    settings.SYNCLANE_JOBS_DIR = tmp_path
    job = make_job(vision)
    body = as_user(alice).get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert (body["lines"], body["offset"]) == ([], 0)


def test_logs_of_a_run_across_nodes_are_read_by_global_rank(
    as_user, alice, vision, settings, tmp_path
):
    """2 nodes x 2 ranks: rank 2 is node rank 1's local rank 0, in that node's own log folder."""
    settings.SYNCLANE_JOBS_DIR = tmp_path
    nodes = [{"node": "n1", "ranks": [0, 1]}, {"node": "n2", "ranks": [2, 3]}]
    job = make_job(vision, world_size=4, placement={"nodes": nodes})
    for node in (0, 1):
        for local in (0, 1):
            folder = job.run_dir / "logs" / f"node{node}" / "run_x" / "attempt_0" / str(local)
            folder.mkdir(parents=True)
            (folder / "stdout.log").write_text(f"node {node} local {local}\n")
    (job.run_dir / "torchrun.node1.log").write_text("n2's torchrun\n")
    client = as_user(alice)

    def lines(query: str) -> list[str]:
        return client.get(f"/api/v1/jobs/{job.pk}/logs/?{query}").json()["lines"]

    assert lines("rank=2") == ["node 1 local 0"]
    assert lines("rank=3") == ["node 1 local 1"]
    assert lines("rank=1") == ["node 0 local 1"]
    assert lines("rank=3&stream=torchrun") == ["n2's torchrun"]
    assert lines("rank=4") == []


def raise_alarm(job, kind="sync_drift", **fields):
    return Alarm.objects.create(job=job, kind=kind, raised_at=timezone.now(), **fields)


def test_alarms_are_filtered_by_state_kind_and_job(as_user, alice, vision):
    job, other = make_job(vision), make_job(vision)
    raise_alarm(job)
    raise_alarm(job, kind="straggler", cleared_at=timezone.now())
    raise_alarm(other)
    client = as_user(alice)
    open_ = client.get(f"/api/v1/alarms/?state=open&job={job.pk}").json()["results"]
    assert [a["kind"] for a in open_] == ["sync_drift"]
    stragglers = client.get("/api/v1/alarms/?kind=straggler").json()["results"]
    assert [a["job"] for a in stragglers] == [job.pk]


def test_acknowledging_an_alarm_records_who_and_hides_it_from_unacknowledged(
    as_user, alice, vision
):
    alarm = raise_alarm(make_job(vision))
    client = as_user(alice)
    body = client.post(f"/api/v1/alarms/{alarm.pk}/acknowledge/").json()
    assert (body["acknowledged"], body["acknowledged_by"]) == (True, "alice")
    assert client.get("/api/v1/alarms/?unacknowledged=true").json()["results"] == []


def test_another_tenants_alarm_is_neither_listed_nor_acknowledged(as_user, bob, vision):
    alarm = raise_alarm(make_job(vision))
    client = as_user(bob)
    assert client.get("/api/v1/alarms/").json()["results"] == []
    assert client.post(f"/api/v1/alarms/{alarm.pk}/acknowledge/").status_code == 404
    alarm.refresh_from_db()
    assert not alarm.acknowledged


def test_a_viewer_cannot_acknowledge(as_user, charlie, vision):
    alarm = raise_alarm(make_job(vision))
    assert as_user(charlie).post(f"/api/v1/alarms/{alarm.pk}/acknowledge/").status_code == 404


def test_a_job_filter_beyond_the_id_range_is_a_400_not_a_database_overflow(as_user, alice):
    # Found by the schema fuzz test: job=1969367029571615058821120 overflowed SQLite (a 500).
    response = as_user(alice).get(f"/api/v1/alarms/?job={2**70}")
    assert response.status_code == 400 and "job" in response.json()
