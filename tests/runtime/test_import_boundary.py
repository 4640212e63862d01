"""workers.runtime is what users import: it must not drag in Django, Celery or Channels."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("django", "celery", "channels", "controlplane")


def test_the_runtime_imports_no_control_plane_framework() -> None:
    code = (
        "import sys, pkgutil, importlib, workers.runtime as rt\n"
        "for m in pkgutil.walk_packages(rt.__path__, 'workers.runtime.'):\n"
        "    importlib.import_module(m.name)\n"
        f"bad = sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_protocol_module_loads_without_torch() -> None:
    code = "import sys, workers.runtime.protocol; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
