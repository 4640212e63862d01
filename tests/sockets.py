"""Test websockets that are always disconnected before the test's event loop closes.

A ``WebsocketCommunicator`` whose consumer closed the socket itself (a refused token, a
wrong origin) keeps its application task alive until it is told ``websocket.disconnect``.
Left to the event loop's teardown, that task is cancelled mid-way through the channel
layer's calls and the teardown can hang (seen in CI). The ``disconnect_sockets`` fixture,
autouse where websockets are tested, disconnects every :class:`Socket` a test opened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

_opened: list[WebsocketCommunicator] = []


class Socket(WebsocketCommunicator):
    """A ``WebsocketCommunicator`` that the ``disconnect_sockets`` fixture cleans up."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _opened.append(self)


@pytest.fixture(autouse=True)
async def disconnect_sockets() -> AsyncIterator[None]:
    yield
    while _opened:
        await _opened.pop().disconnect(timeout=5)
