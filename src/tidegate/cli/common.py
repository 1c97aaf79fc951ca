"""What several commands share: the config loaded, its errors as the command's error; the way to
run this CLI again, for the hints commands print."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from ..config.load import load_config
from ..config.model import Config
from ..errors import ConfigError


def load_or_fail(config_path: str | None) -> Config:
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(f"config error: {exc}") from None


def cli_command() -> str:
    """How to run this tidegate's CLI from the current directory, for a hint to work as printed:
    `tidegate` when the PATH finds this very install, else the script pip put beside this Python
    (`.venv/bin/tidegate` after `make serve`, which installs into the repository's .venv without
    putting it on the PATH), else `python -m tidegate` with this Python."""
    script = Path(sys.executable).parent / "tidegate"
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m tidegate"
    found = shutil.which("tidegate")
    if found is not None and Path(found).resolve() == script.resolve():
        return "tidegate"
    relative = os.path.relpath(script, Path.cwd())
    return shlex.quote(str(script) if relative.startswith("..") else relative)
