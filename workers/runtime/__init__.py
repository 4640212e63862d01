"""Synclane runtime plugin. User scripts import it as ``synclane`` (see ``workers/public``):

    from synclane import Checkpointer, Reporter, wrap

Importing this package stays cheap (no torch import) so the control plane can
use :mod:`workers.runtime.protocol` without loading torch; the torch-facing
names are resolved lazily on first access. No submodule shares a name with one
of them, so ``from workers.runtime import wrap`` is the function even after
``workers.runtime.session`` was imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AllocationClient": "workers.runtime.reporter",
    "Checkpointer": "workers.runtime.checkpoint",
    "LinkFailure": "workers.runtime.health",
    "Reporter": "workers.runtime.reporter",
    "RuntimeConfig": "workers.runtime.config",
    "SynclaneDDP": "workers.runtime.session",
    "wrap": "workers.runtime.session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workers.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
