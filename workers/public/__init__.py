"""Where the ``synclane`` package lives: the one name user scripts import the runtime by.

    import synclane
    from synclane import Checkpointer, Reporter, wrap

This folder holds nothing but ``synclane/``, a thin facade over ``workers.runtime``. The
launcher puts ``pythonpath()`` on every rank's ``PYTHONPATH``, so ``import synclane`` works
from whatever folder a script or bundle runs in, with or without the project installed; it
is not an installed distribution name because a rank may run as another user, with an
environment built from an allow-list, from a bundle unpacked anywhere: an explicit path
entry is the one thing the launcher controls in all of those cases.
"""

from __future__ import annotations

import os
from pathlib import Path

PUBLIC_NAME = "synclane"
# The folder to put on sys.path: it holds the ``synclane`` package and nothing else.
IMPORT_DIR = Path(__file__).resolve().parent
# The project root: ``synclane`` re-exports ``workers.runtime`` from there.
PROJECT_ROOT = IMPORT_DIR.parents[1]


def pythonpath(existing: str | None = None) -> str:
    """Return a ``PYTHONPATH`` value that makes ``import synclane`` work on a rank.

    ``existing`` (the caller's own PYTHONPATH, if any) is kept, after ours.
    """
    entries = [str(IMPORT_DIR), str(PROJECT_ROOT)]
    if existing:
        entries += [e for e in existing.split(os.pathsep) if e and e not in entries]
    return os.pathsep.join(entries)
