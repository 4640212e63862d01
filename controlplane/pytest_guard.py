"""pytest plugin (loaded by ``addopts`` in pyproject.toml): run the suite through devstack.

``python -m controlplane.devstack test`` starts the private Redis the tests may flush and
marks the run with PRIVATE_REDIS_FLAG. Plain ``pytest`` has neither, and would otherwise
stop on a traceback from the settings; this says in one line how to run the suite instead.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from controlplane.devstack import PRIVATE_REDIS_FLAG


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    # A wrapper runs before pytest-django's own hook, which imports the settings.
    if os.environ.get(PRIVATE_REDIS_FLAG) != "1":
        raise pytest.UsageError(
            "run the tests with `make test`, `make test-fast` or "
            "`python -m controlplane.devstack test [pytest args]` (they start the Redis it needs)"
        )
    return (yield)
