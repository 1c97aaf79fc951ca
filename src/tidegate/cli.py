"""The `tidegate` command: serve, keys, check-config, config-schema, models, chat, replay."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import sys
import time
from typing import Any, TypeVar

import click

from .cli_keys import keys
from .config import Config
from .config_load import load_config
from .errors import ConfigError
from .keys import make_key
from .server.workers import Supervisor, claim_port, reuse_port_supported
from .store.open import open_store

T = TypeVar("T")


def _load(config_path: str | None) -> Config:
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(f"config error: {exc}") from None


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _prepare_store(config: Config, loopback: bool) -> str | None:
    """Before any worker serves: retention pruning and the first-start key. (Crash recovery is each
    worker's lease sweep at its start: gateway/leases.py.)"""
    store = open_store(config.store.url)
    await store.open()
    try:
        await store.prune(time.time() - config.store.retention_hours * 3600)
        if os.environ.get("TIDEGATE_MASTER_KEY") or await store.count_keys() > 0:
            return None
        if not loopback:
            click.echo(
                "warning: no API key exists; run `tidegate keys create --name NAME` or set TIDEGATE_MASTER_KEY",
                err=True,
            )
            return None
        key, secret = make_key("default")
        await store.create_key(key)
        return secret
    finally:
        await store.close()


@click.group()
@click.version_option(package_name="tidegate")
def main() -> None:
    """tidegate: a self-hosted, streaming-first LLM API gateway."""


@main.command()
@click.option("--config", "config_path", type=click.Path(), default=None, help="TOML config file")
@click.option("--host", default=None, help="bind address (default: server.host)")
@click.option("--port", type=int, default=None, help="port (default: server.port)")
@click.option("--workers", type=int, default=None, help="worker processes (default: server.workers)")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int | None) -> None:
    """Start the gateway."""
    import uvicorn

    config = _load(config_path)
    if config_path:
        os.environ["TIDEGATE_CONFIG"] = os.path.abspath(config_path)
    host = host or config.server.host
    port = config.server.port if port is None else port
    workers = workers or config.server.workers
    # several workers: a listening socket each (server/workers.py); the port is claimed before the
    # store is touched, so a second gateway on a taken port fails before it marks anything interrupted
    claimed = claim_port(host, port) if workers > 1 and reuse_port_supported() else None
    if claimed is not None:
        port = claimed.getsockname()[1]
    os.environ["TIDEGATE_BIND_HOST"] = host  # /metrics asks for a key unless this is loopback (server/ops.py)
    try:
        created = asyncio.run(_prepare_store(config, _is_loopback(host)))
    except ConfigError as exc:  # a schema newer than this version (store/schema.py)
        raise click.ClickException(str(exc)) from None
    if created is not None:
        click.echo("No API key was configured; created one for this gateway (shown only once):")
        click.echo(created)
        sys.stdout.flush()
    options: dict[str, Any] = {
        "app": "tidegate.server.factory:create_app",
        "factory": True,
        "loop": "uvloop",
        "http": "tidegate.server.guard:GuardedHttpProtocol",  # httptools behind docs/api.md §16's limits
        "timeout_keep_alive": 5,  # an idle keep-alive connection closes after 5 s (docs/api.md §16)
        "lifespan": "on",
        "access_log": False,
        "proxy_headers": False,  # nothing reads the client address or scheme: skip the per-request rewrite
        "server_header": False,  # no `server: uvicorn` on every answer (a header's two regex checks in uvicorn)
        "log_level": "warning",
        # SIGTERM: streams get `drain_s` (server/drain.py), then a moment to write their endings
        "timeout_graceful_shutdown": config.server.drain_s + 5,
    }
    if claimed is not None:
        sys.exit(Supervisor(options, claimed, workers, config.server.worker_timeout_s).run())
    uvicorn.run(host=host, port=port, workers=workers, **options)


main.add_command(keys)


@main.group()
def db() -> None:
    """The store's schema."""


@db.command("upgrade")
@click.option("--config", "config_path", type=click.Path(), default=None)
def db_upgrade(config_path: str | None) -> None:
    """Apply the schema migrations this version has and the store lacks (a gateway does it at start)."""
    from .store import schema

    url = _load(config_path).store.url
    try:
        if url.startswith("sqlite://"):
            from .store.sqlite import SQLiteStore

            applied = schema.upgrade("sqlite", SQLiteStore(url).path)
            backend = "sqlite"
        elif url.startswith(("postgresql://", "postgres://")):
            from .store.postgres import PostgresStore

            store = PostgresStore(url)
            applied = schema.upgrade("postgres", store.dsn, store.schema)
            backend = "postgres"
        else:
            click.echo("the Redis store keeps no schema: nothing to migrate")
            return
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    for migration in applied:
        click.echo(f"applied {migration}")
    click.echo(f"schema up to date: {schema.known(backend)[-1]}")


@main.command("config-schema")
def config_schema() -> None:
    """Print the JSON schema of tidegate.toml (for editors; docs/tidegate.schema.json)."""
    from .config_reference import schema_text

    click.echo(schema_text(), nl=False)


@main.command("check-config")
@click.option("--config", "config_path", type=click.Path(), default=None)
@click.option("--no-probe", is_flag=True, help="only validate; do not try to reach the store or the providers")
def check_config(config_path: str | None, no_probe: bool) -> None:
    """Validate the config, then report whether the store and each provider can be reached (no
    generation is sent). Exits 1 when it reports a problem."""
    from .probe import probe, probe_store

    config = _load(config_path)
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


from .cli_client import chat, models_cmd, replay  # noqa: E402

main.add_command(chat)
main.add_command(models_cmd)
main.add_command(replay)

from .cli_client import generations  # noqa: E402

main.add_command(generations)

from .cli_client import embed  # noqa: E402

main.add_command(embed)
