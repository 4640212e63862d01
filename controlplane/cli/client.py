"""The API client: one ``call`` that returns the decoded body or raises ``CliError``.

A ``CliError`` carries the one line the CLI prints (the server's ``detail``) and the field
errors of a 400, so bad input ends with a clear message and a non-zero exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from controlplane.cli.config import Login

TIMEOUT_S = 15.0


class CliError(Exception):
    """What went wrong, as the CLI prints it; ``fields`` maps field names to reasons."""

    def __init__(
        self,
        message: str,
        fields: dict[str, list[str]] | None = None,
        *,
        status: int | None = None,
        unreachable: bool = False,
    ):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        self.status = status  # the HTTP status of an error answer
        self.unreachable = unreachable  # no answer at all (refused, timed out, network gone)

    @property
    def retryable(self) -> bool:
        """No answer, or a proxy's "the server is not there right now" (502, 503, 504)."""
        return self.unreachable or self.status in (502, 503, 504)


class Api:
    def __init__(self, login: Login):
        self.login = login
        self.http = httpx.Client(
            base_url=login.url.rstrip("/"),
            headers={"Authorization": f"Token {login.token}", "Accept": "application/json"},
            timeout=TIMEOUT_S,
        )

    def call(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """Send one request; return the JSON body of a 2xx, else raise ``CliError``."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self.http.request(method, path, json=body, params=query)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {self.login.url}: {exc}", unreachable=True) from None
        return decoded(response)

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, body=body)

    def upload_bundle(self, tenant: str, archive: bytes, filename: str) -> tuple[Any, bool]:
        """POST the archive as a code bundle of ``tenant``; return it and whether it is new.

        The server answers 201 for a new bundle, 200 for bytes it already had.
        """
        try:
            response = self.http.post(
                "/api/v1/bundles/",
                data={"tenant": tenant},
                files={"file": (filename, archive, "application/gzip")},
            )
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {self.login.url}: {exc}", unreachable=True) from None
        return decoded(response), response.status_code == 201

    def download(self, path: str, dest: Path) -> int:
        """Stream ``path`` into the file ``dest``; return its size in bytes (CliError if refused)."""
        try:
            with self.http.stream("GET", path) as response:
                if not response.is_success:
                    response.read()
                    decoded(response)
                dest.parent.mkdir(parents=True, exist_ok=True)
                with dest.open("wb") as f:
                    for chunk in response.iter_bytes():
                        f.write(chunk)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {self.login.url}: {exc}", unreachable=True) from None
        return dest.stat().st_size


def decoded(response: httpx.Response) -> Any:
    """The JSON of a 2xx; for an error, ``CliError`` with the server's detail and fields."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success:
        return body
    if not isinstance(body, dict):
        raise CliError(f"the server answered {response.status_code}", status=response.status_code)
    fields = {
        k: [str(r) for r in v] for k, v in body.items() if k != "detail" and isinstance(v, list)
    }
    detail = str(body.get("detail") or f"the server answered {response.status_code}")
    if response.status_code == 401:
        detail += " (run `synclane login`)"
    raise CliError(detail, fields, status=response.status_code)
