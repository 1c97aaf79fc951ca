"""What several commands share: the config loaded, its errors as the command's error."""

from __future__ import annotations

import click

from ..config.load import load_config
from ..config.model import Config
from ..errors import ConfigError


def load_or_fail(config_path: str | None) -> Config:
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(f"config error: {exc}") from None
