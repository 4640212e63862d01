"""The ASGI server: daphne, with Twisted's own parsing of form bodies turned off.

    python -m controlplane.asgi_server -b 127.0.0.1 -p 8000 controlplane.asgi:application

takes daphne's arguments. Twisted, under daphne, parses every ``multipart/form-data`` POST
body itself before the application sees it: it holds an upload (a code bundle) in memory a
second time, and answers a body it cannot parse with a bare 400 that has no body, so the
request never reaches Django and the API's JSON error contract breaks. Django parses bodies
itself, so this server builds its requests with Twisted's ``parsePOSTFormSubmission=False``.
"""

from __future__ import annotations

import functools
from typing import Any

from daphne import server as daphne_server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest


class RawBodyHTTPFactory(HTTPFactory):
    """daphne's HTTP factory whose requests leave the body to the application."""

    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802 - Twisted's name
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = functools.partial(WebRequest, parsePOSTFormSubmission=False)
        return protocol


def main() -> None:
    # daphne's Server.run() builds its HTTP factory from this module-level name.
    daphne_server.HTTPFactory = RawBodyHTTPFactory  # type: ignore[misc]
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
