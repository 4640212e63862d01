"""A Content-Security-Policy without inline scripts, which the templates satisfy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# <script> without src= (inline code), on…= handler attributes, javascript: URLs.
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
JS_URL = re.compile(r"javascript:", re.IGNORECASE)


def templates() -> list[Path]:
    return sorted(TEMPLATES.rglob("*.html"))


@pytest.mark.parametrize("path", templates(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_no_template_has_an_inline_script_or_handler(path):
    text = path.read_text()
    for pattern in (INLINE_SCRIPT, HANDLER, JS_URL):
        assert not pattern.search(text), f"{path.name}: {pattern.search(text).group(0)}"


def test_the_scan_finds_what_it_looks_for():
    assert INLINE_SCRIPT.search("<script>alert(1)</script>")
    assert not INLINE_SCRIPT.search('<script src="/static/x.js"></script>')
    assert HANDLER.search('<button onclick="go()">')
    assert JS_URL.search('<a href="javascript:go()">')


@pytest.mark.parametrize("url", ["/accounts/login/", "/", "/cluster/", "/alarms/"])
def test_every_page_sends_a_policy_that_forbids_inline_scripts(url, alice):
    client = Client()
    client.force_login(alice)
    policy = client.get(url)["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
