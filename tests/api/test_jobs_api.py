"""The job list (filters, ordering, cursor pages) and a job's events."""

from __future__ import annotations

from controlplane.jobs.models import JobEvent

from .conftest import make_job


def results(response) -> list[dict]:
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def test_jobs_filter_by_status_tenant_and_name(as_user, alice, vision, speech):
    make_job(vision, "resnet-a")
    make_job(vision, "bert", status="running")
    make_job(speech, "resnet-speech")
    admin = as_user(alice)
    assert [j["name"] for j in results(admin.get("/api/v1/jobs/?status=running"))] == ["bert"]
    assert [j["name"] for j in results(admin.get("/api/v1/jobs/?name=RESNET"))] == ["resnet-a"]
    assert results(admin.get("/api/v1/jobs/?tenant=speech")) == []


def test_a_site_admin_filters_any_tenant(as_user, admin_user, vision, speech):
    make_job(vision, "a")
    make_job(speech, "b")
    names = [j["name"] for j in results(as_user(admin_user).get("/api/v1/jobs/?tenant=speech"))]
    assert names == ["b"]


def test_an_unknown_status_is_a_400_naming_the_parameter(as_user, alice):
    response = as_user(alice).get("/api/v1/jobs/?status=sleeping")
    assert response.status_code == 400
    assert "status" in response.json()


def test_an_unknown_ordering_is_a_400_naming_the_parameter(as_user, alice):
    response = as_user(alice).get("/api/v1/jobs/?ordering=-secret,name")
    assert response.status_code == 400
    assert response.json()["ordering"] == [
        "-secret: not one of created_at, id, name, priority, status"
    ]


def test_jobs_are_ordered_by_the_ordering_parameter(as_user, alice, vision):
    for name in ("b", "c", "a"):
        make_job(vision, name)
    client = as_user(alice)
    assert [j["name"] for j in results(client.get("/api/v1/jobs/"))] == ["a", "c", "b"]
    assert [j["name"] for j in results(client.get("/api/v1/jobs/?ordering=name"))] == [
        "a",
        "b",
        "c",
    ]


def test_cursor_pages_walk_every_job_once_even_when_new_ones_arrive(as_user, alice, vision):
    for i in range(5):
        make_job(vision, f"job-{i}")
    client = as_user(alice)
    first = client.get("/api/v1/jobs/?page_size=2").json()
    make_job(vision, "newer")
    seen = [j["name"] for j in first["results"]]
    url = first["next"]
    while url:
        page = client.get(url).json()
        seen += [j["name"] for j in page["results"]]
        url = page["next"]
    assert seen == ["job-4", "job-3", "job-2", "job-1", "job-0"]


def test_a_jobs_events_are_listed_oldest_first(as_user, alice, vision):
    job = make_job(vision)
    JobEvent.objects.create(job=job, from_status="", to_status="queued", reason="submitted")
    JobEvent.objects.create(job=job, from_status="queued", to_status="cancelled", reason="by alice")
    events = as_user(alice).get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert [e["to_status"] for e in events] == ["queued", "cancelled"]


def test_another_tenants_job_events_are_a_404(as_user, bob, vision):
    job = make_job(vision)
    assert as_user(bob).get(f"/api/v1/jobs/{job.pk}/events/").status_code == 404
