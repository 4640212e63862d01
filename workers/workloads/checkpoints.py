"""Atomic checkpoints in a run directory: ``ckpt-<step:08d>.pt``, newest wins."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from workers.runtime.protocol import CHECKPOINT_PREFIX

_NAME = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d{{8}})\.pt$")


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / f"{CHECKPOINT_PREFIX}{step:08d}.pt"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """Return the newest complete checkpoint in ``run_dir``, or None when there is none.

    Temporary files from an interrupted write never match the name pattern.
    """
    if not run_dir.is_dir():
        return None
    found = [(int(m.group(1)), f) for f in run_dir.iterdir() if (m := _NAME.match(f.name))]
    return max(found)[1] if found else None


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write ``state`` atomically (temp file, fsync, rename) and prune all but ``keep``.

    Returns the checkpoint's path. A crash mid-write leaves the previous checkpoint intact.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(run_dir, step)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _prune(run_dir, keep)
    return final


def load_checkpoint(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return state


def _prune(run_dir: Path, keep: int) -> None:
    found = sorted((int(m.group(1)), f) for f in run_dir.iterdir() if (m := _NAME.match(f.name)))
    for _, old in found[:-keep]:
        old.unlink(missing_ok=True)
