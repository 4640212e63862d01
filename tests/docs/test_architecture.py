"""docs/architecture.md shows the control plane's layers as the import-linter contract declares them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [" | ".join(part.strip() for part in layer.split("|")) for layer in contract["layers"]]


def documented_layers() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Layers", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block, "the Layers section has no diagram"
    names = []
    for line in block.group(1).splitlines():
        # "scheduling | lib     the pure ..." -> "scheduling | lib"; "api   REST ..." -> "api"
        match = re.match(r"\s*(\w+(?: \| \w+)*)\s{2,}", line)
        assert match, f"unreadable diagram line: {line!r}"
        names.append(match.group(1))
    return names


def test_the_layer_diagram_lists_the_contracts_layers_in_order():
    assert documented_layers() == contract_layers()


def test_every_ignored_import_of_the_layers_contract_is_named_in_the_text():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    section = (ROOT / "docs" / "architecture.md").read_text().split("## Layers", 1)[1]
    for rule in contract["ignore_imports"]:
        importer, imported = (m.strip() for m in rule.split("->"))
        short = imported.removeprefix("controlplane.")
        assert f"`{short}`" in section, f"{rule} is not explained in docs/architecture.md"
