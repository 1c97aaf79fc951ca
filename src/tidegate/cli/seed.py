"""`tidegate seed-generations`: made-up records and their rollups in the configured store (docs/console.md, "Scale")."""

from __future__ import annotations

import asyncio

import click

from ..config.load import load_config
from ..errors import ConfigError
from ..store.open import open_store


@click.command("seed-generations")
@click.option("--config", "config_path", type=click.Path(), default=None, help="TOML config file")
@click.option("--count", type=click.IntRange(1, 100_000_000), default=1_000_000, show_default=True)
@click.option(
    "--keys", type=click.IntRange(1, 1000), default=12, show_default=True, help="seed keys to spread them over"
)
def seed_generations(config_path: str | None, count: int, keys: int) -> None:
    """Write COUNT realistic generation records (30 days, several models, providers and keys, some
    failures) and their console rollups into the store (SQLite or PostgreSQL), to try the console
    at scale. Never on a store that serves real traffic: the records are made up."""
    from ..store.seed import seed

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None

    async def _run() -> tuple[int, float]:
        store = open_store(config.store.url)
        await store.open()
        try:
            return await seed(store, count, keys)
        finally:
            await store.close()

    try:
        written, seconds = asyncio.run(_run())
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"seeded {written} generation records and their rollups in {seconds:.1f} s")
