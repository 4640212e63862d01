"""Real Chromium (Debian's package) driven by Playwright.

Browser tests run in their own pytest invocation (`make test` does this): Playwright's
sync API leaves an event loop that would upset async tests run after it.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from playwright.sync_api import sync_playwright

from ..integration.conftest import live  # noqa: F401 - the live stack, shared

# Playwright's sync API runs an event loop in this thread; Django then refuses ORM calls
# unless told that this process (browser tests only) knows what it is doing.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def wait_for(page, expression: str, *, timeout_s: float) -> None:
    """Poll ``expression`` in the page until it is truthy; fail after ``timeout_s``.

    Playwright's wait_for_function compiles its predicate with eval, which the pages'
    Content-Security-Policy (script-src 'self') refuses; page.evaluate is not affected.
    """
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"still false after {timeout_s} s: {expression}"
        page.wait_for_timeout(250)
