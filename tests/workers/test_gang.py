"""What the supervisors of a run across nodes tell each other, in a real Redis."""

from __future__ import annotations

import socket

import pytest

from workers.supervisor import gang
from workers.supervisor import lease as leases

pytestmark = pytest.mark.django_db


def attempt(run_id: str, **fields) -> gang.Attempt:
    return gang.Attempt(
        run_id=run_id, endpoint="127.0.0.1:29500", nnodes=2, redis_url="redis://x", **fields
    )


def test_a_stop_or_an_end_never_overwrites_a_newer_announcement(lease_redis):
    first, second = attempt("synclane-5-1-1"), attempt("synclane-5-2-1")
    gang.announce(5, first)
    assert gang.announce_stop(5, gang.Attempt(**{**first.__dict__, "state": gang.STOP}))
    assert gang.current(5).state == gang.STOP

    gang.announce(5, second)  # the job was readmitted: a new driver announced its attempt
    assert not gang.announce_stop(5, gang.Attempt(**{**first.__dict__, "state": gang.STOP}))
    gang.forget(5, first.run_id)
    assert gang.current(5) == second
    gang.forget(5, second.run_id)
    assert gang.current(5) is None


def test_each_node_reports_on_its_own_and_the_driver_reads_them_all(lease_redis):
    gang.report(9, 1, gang.Report("synclane-9-1-1", gang.STARTED, "n2", pgid=123))
    gang.report(9, 2, gang.Report("synclane-9-1-1", gang.EXITED, "n3", code=1, detail="rank 5"))
    said = gang.reports(9)
    assert said[1].state == gang.STARTED and said[1].pgid == 123
    assert said[2].code == 1 and said[2].detail == "rank 5"


def test_the_rendezvous_port_is_free_and_taken_from_the_configured_range(settings):
    port = gang.rendezvous_port()
    with socket.socket() as sock:
        sock.bind(("", port))  # free on every interface

    with socket.socket() as held:
        held.bind(("", 0))
        busy = held.getsockname()[1]
        settings.SYNCLANE_RDZV_PORTS = f"{busy}-{busy + 50}"
        chosen = gang.rendezvous_port()
        assert busy < chosen <= busy + 50
        settings.SYNCLANE_RDZV_PORTS = f"{busy}"
        with pytest.raises(OSError, match="no free port"):
            gang.rendezvous_port()


def test_a_follower_sees_the_rendezvous_open_only_once_something_listens_there():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{sock.getsockname()[1]}"
        assert not gang.rendezvous_open(endpoint)  # bound, not listening: refused
        sock.listen()
        assert gang.rendezvous_open(endpoint)
    assert not gang.rendezvous_open(endpoint)
    assert not gang.rendezvous_open("no-port-here")


def test_part_leases_are_per_node_rank_and_drained_with_the_host(lease_redis, make_job):
    job = make_job("running")
    fence = job.fence
    part = leases.acquire_part(job.pk, 1)
    assert part is not None and leases.acquire_part(job.pk, 1) is None
    other = leases.acquire_part(job.pk, 2)
    assert other is not None and leases.holder(job.pk, 2) == other.owner
    job.refresh_from_db()
    assert job.fence == fence  # a part drives no job state: no new fence
    assert part.renew()
    assert {job_id for job_id, _ in leases.held_by_this_host()} == {job.pk}
    part.release()
    assert leases.holder(job.pk, 1) is None and leases.holder(job.pk, 2) is not None


def test_a_job_s_part_comes_from_its_placement_in_node_rank_order(make_job):
    nodes = [
        {"node": "n1", "address": "10.0.0.1", "ranks": [0, 1, 2]},
        {"node": "n2", "address": "10.0.0.2", "ranks": [3]},
    ]
    job = make_job("admitted", world_size=4, placement={"nodes": nodes})
    assert gang.part_of(job, 1) == gang.Part(1, 2, "n2", "10.0.0.2", 1)
    assert gang.part_of(job, 2) is None
    single = make_job("admitted", placement={"nodes": nodes[:1]})
    assert gang.nodes_of(single) == [] and gang.part_of(single, 0) is None
