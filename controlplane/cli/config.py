"""Where ``synclane login`` keeps the server URL and token: the user's config folder, 0600."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_config_path


@dataclass(frozen=True)
class Login:
    url: str
    token: str


def config_file() -> Path:
    """``$XDG_CONFIG_HOME/synclane/login.json`` on Linux (platformdirs decides elsewhere)."""
    return user_config_path("synclane") / "login.json"


def save(login: Login) -> Path:
    """Write the login readable by its owner alone (0600, also when the file existed)."""
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": login.url, "token": login.token}, f)
    return path


def load() -> Login | None:
    """The saved login, or None when there is none (or it cannot be read)."""
    try:
        data = json.loads(config_file().read_text())
        return Login(url=str(data["url"]), token=str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
