"""docs/api.md stays true: it shows every API path, and every CLI command it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from drf_spectacular.generators import SchemaGenerator

from controlplane.cli.main import app

API_MD = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()


def test_every_path_of_the_schema_is_shown_in_the_api_docs():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    for path in paths:
        pattern = re.escape(path).replace(r"\{", "{").replace(r"\}", "}")
        pattern = re.sub(r"\{[^}]+\}", "[^/ ]+", pattern)
        assert re.search(pattern, API_MD), f"{path} is not in docs/api.md"


def cli_commands() -> set[str]:
    group = typer.main.get_command(app)
    names = set(group.commands)
    for sub_app in ("quota", "nodes"):
        names |= {f"{sub_app} {sub}" for sub in group.commands[sub_app].commands}
    return names


def test_every_cli_command_named_in_the_api_docs_exists_and_each_is_shown():
    named = set(re.findall(r"`synclane ((?:quota|nodes) \w+|\w+)", API_MD))
    commands = cli_commands()
    assert named - commands == set()
    assert commands - {"quota"} - named == set()
