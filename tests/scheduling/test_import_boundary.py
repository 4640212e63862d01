"""The scheduling core is pure: importing it loads nothing outside the standard library."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
before = set(sys.modules)
import importlib, pkgutil
import controlplane.scheduling as core
for m in pkgutil.walk_packages(core.__path__, 'controlplane.scheduling.'):
    importlib.import_module(m.name)
{extra}
new = {{name.split('.')[0] for name in set(sys.modules) - before}}
print(','.join(sorted(new - set(sys.stdlib_module_names) - {{'controlplane'}})))
"""


def outside_stdlib(extra: str = "") -> str:
    code = CODE.format(extra=extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_scheduling_core_imports_only_the_standard_library() -> None:
    assert outside_stdlib() == ""


def test_the_boundary_check_would_catch_django() -> None:
    assert "django" in outside_stdlib("import django.db").split(",")
