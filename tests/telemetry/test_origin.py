"""A websocket's Origin must match the server's own origin in scheme, host and port."""

from __future__ import annotations

import pytest

from controlplane.asgi import application
from controlplane.lib.origin import origin_allowed
from tests.sockets import Socket

from .test_consumer import cookie_for, make_job


def scope(origin: str | None, host: str = "127.0.0.1:8000", scheme: str = "ws") -> dict:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return {"type": "websocket", "scheme": scheme, "headers": headers}


@pytest.fixture
def no_trusted_origins(settings):
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]


def test_the_pages_own_origin_is_accepted(no_trusted_origins):
    assert origin_allowed(scope("http://127.0.0.1:8000"))
    assert origin_allowed(scope("https://localhost", host="localhost", scheme="wss"))


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # another program on the same machine
        "http://127.0.0.1",  # port 80, not 8000
        "https://127.0.0.1:8000",  # another scheme
        "http://localhost:8000",  # another host, though allowed as a host name
        "http://evil.example:8000",
        "null",
        "http://127.0.0.1:99999",
    ],
)
def test_an_origin_differing_in_scheme_host_or_port_is_refused(no_trusted_origins, origin):
    assert not origin_allowed(scope(origin))


def test_a_socket_without_an_origin_is_refused(no_trusted_origins):
    assert not origin_allowed(scope(None))


def test_a_host_outside_allowed_hosts_gives_no_own_origin(no_trusted_origins):
    assert not origin_allowed(scope("http://evil.example:8000", host="evil.example:8000"))


def test_a_trusted_origin_is_accepted_on_exact_match_only(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://synclane.example.org"]
    assert origin_allowed(scope("https://synclane.example.org", host="internal:8000"))
    assert origin_allowed(scope("https://synclane.example.org:443", host="internal:8000"))
    assert not origin_allowed(scope("https://synclane.example.org:8443", host="internal:8000"))


def test_behind_a_trusted_tls_proxy_the_own_origin_is_https(no_trusted_origins, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = scope("https://localhost", host="localhost")
    proxied["headers"].append((b"x-forwarded-proto", b"https"))
    assert origin_allowed(proxied)
    assert not origin_allowed(scope("https://localhost", host="localhost"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_logged_in_socket_from_another_port_is_closed_before_the_consumer(
    private_redis, no_trusted_origins, alice, vision
):
    job = await make_job(vision, alice)
    cookie = (b"cookie", await cookie_for(alice))
    host = (b"host", b"127.0.0.1:8000")

    def socket(origin: bytes) -> Socket:
        return Socket(
            application, f"/ws/jobs/{job.pk}/", headers=[host, (b"origin", origin), cookie]
        )

    same = socket(b"http://127.0.0.1:8000")
    assert (await same.connect())[0]
    await same.disconnect()
    other_port = socket(b"http://127.0.0.1:9999")
    assert not (await other_port.connect())[0]
