"""Synclane runtime plugin: what a training script imports.

    from workers.runtime import wrap, Reporter

Importing this package stays cheap (no torch import) so the control plane can
use :mod:`workers.runtime.protocol` without loading torch; the torch-facing
names are resolved lazily on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AllocationClient": "workers.runtime.reporter",
    "LinkFailure": "workers.runtime.health",
    "Reporter": "workers.runtime.reporter",
    "RuntimeConfig": "workers.runtime.config",
    "wrap": "workers.runtime.wrap",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workers.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
