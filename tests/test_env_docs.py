"""Every environment variable is documented where a user looks for it, and nothing else is.

One list per side: the control plane's is every name its settings read through
``controlplane.lib.env`` (plus the port ``devstack up`` reads); the runtime's is the
``ENV_*`` constants of ``workers.runtime.protocol``.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from controlplane import devstack
from controlplane.lib import env
from workers.runtime import protocol

REPO = Path(__file__).resolve().parent.parent
ENV_EXAMPLE = (REPO / ".env.example").read_text()
RUNTIME_README = (REPO / "workers" / "runtime" / "README.md").read_text()
RUNTIME_SECTION = "# --- Runtime plugin ---"


def control_plane_names() -> set[str]:
    assert settings.configured and settings.SECRET_KEY  # the settings module has been read
    return set(env.names_read()) | {devstack.PORT_ENV}


def runtime_names() -> set[str]:
    return {value for name, value in vars(protocol).items() if name.startswith("ENV_")}


def documented_settings() -> set[str]:
    head = ENV_EXAMPLE.split(RUNTIME_SECTION)[0]
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)=", head, flags=re.MULTILINE))


def documented_runtime_variables() -> set[str]:
    tail = ENV_EXAMPLE.split(RUNTIME_SECTION)[1]
    return set(re.findall(r"^# ([A-Z][A-Z0-9_]*)=", tail, flags=re.MULTILINE))


def test_env_example_documents_exactly_the_variables_the_settings_read() -> None:
    assert documented_settings() == control_plane_names()


def test_env_example_lists_exactly_the_runtimes_variables() -> None:
    assert documented_runtime_variables() == runtime_names()


def test_the_runtime_readme_documents_exactly_the_runtimes_variables() -> None:
    assert set(re.findall(r"SYNCLANE_[A-Z0-9_]+", RUNTIME_README)) == runtime_names()
