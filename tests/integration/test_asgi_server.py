"""The ASGI server hands request bodies to Django untouched: a form body it cannot parse
still gets the API's JSON error, from the application, not a bare 400 from the server."""

from __future__ import annotations

import httpx
import pytest

from controlplane.accounts.services import token_issue

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BOUNDARY = "c637e12e2b1a998d80d1b087531af51c"
# A multipart body with no parts at all: Twisted's own parser refuses it.
EMPTY_MULTIPART = f"--{BOUNDARY}--\r\n".encode()


@pytest.mark.parametrize("path", ["/api/v1/auth/token/", "/api/v1/bundles/"])
def test_an_unparseable_form_body_gets_the_apis_json_error(live, admin_user, path):
    token = token_issue(user=admin_user, name="asgi")[1]
    response = httpx.post(
        f"{live.url}{path}",
        content=EMPTY_MULTIPART,
        headers={
            "Authorization": f"Token {token}",
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        },
        timeout=30,
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()  # names what is wrong, e.g. {"file": [...]}
