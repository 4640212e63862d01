"""The per-job Redis user, against a real redis-server: its own keys only."""

from __future__ import annotations

import pytest
import redis

from controlplane import devstack
from tests.faults import RedisServer
from workers.runtime import protocol
from workers.supervisor import redis_acl

Refused = redis.exceptions.NoPermissionError


@pytest.fixture
def job7(redis_url, r):
    url = redis_acl.create_job_user(r, 7, redis_url).url
    client = redis.Redis.from_url(url, decode_responses=True)
    yield client
    client.close()
    redis_acl.delete_job_user(r, 7)


def test_the_job_user_writes_its_stream_and_reads_its_allocation(job7, r):
    r.set(protocol.allocation_key(7), "1000")
    job7.xadd(protocol.telemetry_stream(7), {"type": "metrics", "data": "{}"})
    assert job7.get(protocol.allocation_key(7)) == "1000"
    assert r.xlen(protocol.telemetry_stream(7)) == 1


def test_the_supervisor_registered_the_stream_for_the_ingest(job7, r):
    assert r.smembers(protocol.ACTIVE_STREAMS_KEY) == {"7"}


def test_the_job_user_subscribes_to_its_own_channel_only(job7):
    pubsub = job7.pubsub()
    pubsub.subscribe(protocol.allocation_channel(7))
    assert pubsub.get_message(timeout=2)["type"] == "subscribe"
    with pytest.raises(Refused):
        pubsub.subscribe(protocol.allocation_channel(8))
        pubsub.get_message(timeout=2)
    pubsub.close()


@pytest.mark.parametrize(
    "attempt",
    [
        lambda c: c.xadd(protocol.telemetry_stream(8), {"type": "metrics"}),
        lambda c: c.get(protocol.allocation_key(8)),
        lambda c: c.xrange(protocol.telemetry_stream(7)),
        lambda c: c.sadd(protocol.ACTIVE_STREAMS_KEY, "x"),
        lambda c: c.lpush("celery", "task"),
        lambda c: c.flushall(),
        lambda c: c.keys("*"),
        lambda c: c.config_get("*"),
        lambda c: c.acl_list(),
        lambda c: c.set(protocol.allocation_key(7), "1"),
    ],
    ids=[
        "other stream", "other allocation", "read own stream", "active set", "celery queue",
        "flushall", "keys", "config", "acl", "write own allocation",
    ],
)  # fmt: skip
def test_everything_else_is_refused(job7, attempt):
    with pytest.raises(Refused):
        attempt(job7)


def test_the_run_s_url_is_its_own_user_never_the_server_s_password(redis_url, r):
    server_password = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["password"]
    assert server_password  # the suite's Redis has one, as devstack's
    credential = redis_acl.create_job_user(r, 7, redis_url)
    kwargs = redis.Redis.from_url(credential.url).connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("synclane-job-7", credential.password)
    assert server_password not in credential.url
    assert credential.url.endswith(redis_url.rsplit("@", 1)[1])  # same host, port, database


def test_deleting_the_user_ends_its_access(redis_url, r):
    url = redis_acl.create_job_user(r, 9, redis_url).url
    redis_acl.delete_job_user(r, 9)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(url).ping()


def test_after_a_redis_restart_the_supervisor_restores_the_same_credential(tmp_path):
    server = RedisServer.start(tmp_path)
    try:
        devstack.wait_for_port(server.port, timeout=15, proc=server.proc)
        admin = redis.Redis.from_url(server.url)
        credential = redis_acl.create_job_user(admin, 11, server.url)
        assert credential.restore(admin) is False  # nothing lost yet

        server.kill()
        server.restart()
        devstack.wait_for_port(server.port, timeout=15, proc=server.proc)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(credential.url).ping()  # a restart keeps no ACL users

        assert credential.restore(admin) is True
        run = redis.Redis.from_url(credential.url)
        run.xadd(protocol.telemetry_stream(11), {"type": "metrics", "data": "{}"})
        assert admin.smembers(protocol.ACTIVE_STREAMS_KEY) == {b"11"}
        run.close()
        admin.close()
    finally:
        server.stop()
