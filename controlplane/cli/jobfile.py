"""A job file (YAML or TOML) merged with command-line flags into a submit body."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from controlplane.cli.client import CliError


def load_job_file(path: Path) -> dict[str, Any]:
    """The job spec in ``path`` (``.toml`` is TOML, anything else YAML); CliError if bad."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise CliError(
            f"{path} is not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold a mapping of job fields")
    return data


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """``["lr=1e-3", "cohort=research"]`` -> ``{"lr": 0.001, "cohort": "research"}``.

    A value that reads as JSON (number, true/false, null) is taken as that; else a string.
    """
    values: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise CliError(f"{pair!r}: expected NAME=VALUE")
        try:
            values[name] = json.loads(raw)
        except ValueError:
            values[name] = raw
    return values


def submit_body(file_data: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The file's fields, overridden by every flag that was given; hyperparameters merge."""
    body = dict(file_data)
    hp = {**(body.get("hyperparameters") or {}), **flags.pop("hyperparameters", {})}
    body.update({k: v for k, v in flags.items() if v is not None})
    if hp:
        body["hyperparameters"] = hp
    return body
