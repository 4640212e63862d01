"""Shared fixtures: the demo personas and tenants.

Alice is tenant admin of vision, Bob a member of speech, Charlie a viewer of vision.
The live stack (Celery worker, ingest, ASGI server) is in tests/integration/conftest.py.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
import redis as redis_lib
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError
from django.test import TransactionTestCase

from controlplane import devstack
from controlplane.jobs.models import Queue
from controlplane.tenancy.models import Membership, Role, Tenant

PASSWORD = "correct-horse-battery"

# Hash the suite's passwords cheaply in this process (tests/hashers.py says why it is safe).
PRODUCTION_HASHERS = list(settings.PASSWORD_HASHERS)
settings.PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher", *PRODUCTION_HASHERS]


@pytest.fixture(autouse=True)
def _production_hashes_against_live_servers(request, settings) -> None:
    """Tests that talk to a live server hash as it does.

    At a user's first login the server upgrades a hash whose iteration count is not its own,
    and the changed hash ends every session the test made for that user (Django ties a
    session to the password hash). Autouse: runs before the user fixtures.
    """
    if request.node.get_closest_marker("integration") or request.node.get_closest_marker("browser"):
        settings.PASSWORD_HASHERS = PRODUCTION_HASHERS


# Integration tests share the database with live worker processes. On PostgreSQL the
# TRUNCATE that empties it after a transactional test can deadlock with a worker's
# short scheduling transaction; the server then aborts one of the two. Retry the flush
# (the worker's side retries by itself on the next tick).
_flush = TransactionTestCase._fixture_teardown


def _flush_retrying_deadlocks(self: TransactionTestCase) -> None:
    for attempt in range(5):
        try:
            return _flush(self)
        except (OperationalError, CommandError) as exc:
            cause = exc.__cause__ or exc
            if "deadlock detected" not in str(cause) or attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))


TransactionTestCase._fixture_teardown = _flush_retrying_deadlocks


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Empty Django's cache (login rate-limit counters live there) before every test."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[str]:
    """A redis-server of this pytest process alone (runtime and workload tests use it).

    Separate from the suite's Redis so that flushing it never touches the broker and
    channel layer of the live worker processes. Yields its URL (as the ``default`` user, with
    the server's password); stopped at the end.
    """
    port, password = devstack.free_port(), devstack.new_redis_password()
    argv = devstack.redis_server_argv(port, tmp_path_factory.mktemp("redis"), password=password)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        devstack.wait_for_port(port, timeout=15, proc=proc)
        yield devstack.private_redis_url(port, password)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """``redis_server``'s URL with its database emptied and its ACL users but ``default``
    deleted (FLUSHDB keeps users; safe: this process started the server)."""
    client = redis_lib.Redis.from_url(redis_server, decode_responses=True)
    client.flushdb()
    for user in client.acl_users():
        if user != "default":
            client.acl_deluser(user)
    client.close()
    return redis_server


@pytest.fixture
def r(redis_url: str) -> Iterator[redis_lib.Redis]:
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def private_redis() -> redis_lib.Redis:
    """The suite's own Redis, emptied for this test (never a server we did not start).

    pytest_configure has checked that devstack started it for this run.
    """
    client = redis_lib.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    client.flushdb()
    return client


@pytest.fixture
def vision(db) -> Tenant:
    tenant = Tenant.objects.create(slug="vision", name="Vision", slot_quota=4)
    Queue.objects.create(tenant=tenant, name="default")
    return tenant


@pytest.fixture
def speech(db) -> Tenant:
    tenant = Tenant.objects.create(slug="speech", name="Speech", slot_quota=4)
    Queue.objects.create(tenant=tenant, name="default")
    return tenant


def _member(django_user_model, username: str, tenant: Tenant, role: str):
    user = django_user_model.objects.create_user(username=username, password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


@pytest.fixture
def alice(django_user_model, vision):
    return _member(django_user_model, "alice", vision, Role.TENANT_ADMIN)


@pytest.fixture
def bob(django_user_model, speech):
    return _member(django_user_model, "bob", speech, Role.MEMBER)


@pytest.fixture
def charlie(django_user_model, vision):
    return _member(django_user_model, "charlie", vision, Role.VIEWER)


@pytest.fixture
def spec_input() -> dict[str, object]:
    """A valid job submission as the API receives it (tenant added by the test)."""
    return {"name": "tiny", "workload": "tiny_gpt", "world_size": 2, "steps": 20, "sync": "full"}
