"""noop: a built-in job that takes one empty step and exits.

    python -m workers.workloads.noop --steps 1 --run-dir DIR

It measures the control plane's own path (API, database, Celery, supervisor) without training:
no torch, no ranks, so the supervisor starts it as one plain process instead of torchrun (see
``workers.supervisor.command``). ``tests/benchmarks/bench_admission.py`` submits thousands of
them. It accepts, and ignores, the flags the supervisor gives every workload, without
importing argparse: the process is all the job is, and argparse's imports (re, gettext,
shutil) were a fifth of its start-up.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """One empty step; 0. ``--help`` says what it is."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print("usage: python -m workers.workloads.noop [--steps N] [...]: one empty step, exit 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
