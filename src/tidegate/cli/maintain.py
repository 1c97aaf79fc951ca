"""Commands that look after a gateway's config and store without serving it: `check-config`,
`config-schema` and `db upgrade`."""

from __future__ import annotations

import sys

import click

from ..errors import ConfigError
from ..store_url import store_backend
from .common import load_or_fail


@click.group("db")
def db() -> None:
    """The store's schema."""


@db.command("upgrade")
@click.option("--config", "config_path", type=click.Path(), default=None)
def db_upgrade(config_path: str | None) -> None:
    """Apply the schema migrations this version has and the store lacks (a gateway does it at start)."""
    from ..store import schema

    url = load_or_fail(config_path).store.url
    backend = store_backend(url)
    try:
        if backend == "sqlite":
            from ..store.sqlite import SQLiteStore

            applied = schema.upgrade("sqlite", SQLiteStore(url).path)
        elif backend == "postgres":
            from ..store.postgres import PostgresStore

            store = PostgresStore(url)
            applied = schema.upgrade("postgres", store.dsn, store.schema)
        else:
            click.echo("the Redis store keeps no schema: nothing to migrate")
            return
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    for migration in applied:
        click.echo(f"applied {migration}")
    click.echo(f"schema up to date: {schema.known(backend)[-1]}")


@click.command("config-schema")
def config_schema() -> None:
    """Print the JSON schema of tidegate.toml (for editors; docs/tidegate.schema.json)."""
    from ..config.reference import schema_text

    click.echo(schema_text(), nl=False)


@click.command("check-config")
@click.option("--config", "config_path", type=click.Path(), default=None)
@click.option("--no-probe", is_flag=True, help="only validate; do not try to reach the store or the providers")
def check_config(config_path: str | None, no_probe: bool) -> None:
    """Validate the config, then report whether the store and each provider can be reached (no
    generation is sent). Exits 1 when it reports a problem."""
    from ..probe import probe, probe_store

    config = load_or_fail(config_path)
    click.echo(f"config OK: {config.source}")
    click.echo(f"  models: {', '.join(config.models) or '-'}")
    problems = 0
    if no_probe:
        click.echo(f"  store: {config.store.url.split('://')[0]}")
    else:
        store = probe_store(config.store.url)
        problems += not store.ok
        click.echo(f"  store: {store.provider}: {'ok' if store.ok else 'PROBLEM'}: {store.detail}")
    click.echo("  providers:")
    for name, p in config.providers.items():
        if no_probe:
            click.echo(f"    {name} ({p.kind})")
            continue
        result = probe(p)
        problems += not result.ok
        click.echo(f"    {name} ({p.kind}): {'ok' if result.ok else 'PROBLEM'}: {result.detail}")
    if problems:
        click.echo(f"{problems} problem{'s' if problems > 1 else ''} found", err=True)
        sys.exit(1)
