"""The `tidegate` command: its group and, in one place, the commands it has."""

from __future__ import annotations

import click

from .client import chat, embed, generations, models_cmd, replay
from .keys import keys
from .maintain import check_config, config_schema, db
from .seed import seed_generations
from .serve import serve


@click.group()
@click.version_option(package_name="tidegate")
def main() -> None:
    """tidegate: a self-hosted, streaming-first LLM API gateway."""


COMMANDS: tuple[click.Command, ...] = (
    serve,
    keys,
    seed_generations,
    db,
    config_schema,
    check_config,
    chat,
    models_cmd,
    replay,
    generations,
    embed,
)
for command in COMMANDS:
    main.add_command(command)
