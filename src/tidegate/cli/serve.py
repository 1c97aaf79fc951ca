"""`tidegate serve`: the config loaded and checked once, the port claimed, the store prepared
(pruning, the first start's key), then the server (server/runtime/run.py: one process, or workers
that each load the same config file once)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import sys
import threading
import time
from types import FrameType
from urllib.parse import urlsplit

import click

from ..config.model import Config
from ..errors import ConfigError
from ..keys import make_key
from ..server.runtime.workers import claim_port, reuse_port_supported
from ..store.facets import console_of
from ..store.open import open_store
from . import terminal
from .common import cli_command, load_or_fail


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
        await console_of(store).prune(time.time(), config.logging.body_retention_s)  # bodies, old buckets
        if os.environ.get("TIDEGATE_MASTER_KEY") or await store.count_keys() > 0:
            return None
        if not loopback:  # a key printed on a public bind could end up in someone else's log
            click.echo(
                "warning: no API key exists and TIDEGATE_MASTER_KEY is not set: nothing can use this gateway;"
                " set TIDEGATE_MASTER_KEY to a secret of your own (the admin key: console,"
                f" `{cli_command()} keys`)",
                err=True,
            )
            return None
        # an admin key: the one way in to the console, `tidegate keys` and the usage report without a
        # master key (a plain key is refused there)
        key, secret = make_key("admin")
        key.admin = True
        await store.create_key(key)
        return secret
    finally:
        await store.close()


def _base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def redacted_store_url(url: str) -> str:
    """The store URL without its password or query (either may hold a credential)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    return f"{parts.scheme}://{netloc}{parts.path}"


def _startup_line(config: Config, host: str, port: int) -> str:
    source = config.source if config.source.startswith("<") else os.path.abspath(config.source)
    base, store = _base_url(host, port), redacted_store_url(config.store.url)
    return f"tidegate: serving {base} (config: {source}; store: {store}; console: {base}/ui)"


def _print_first_key(secret: str, base: str) -> None:
    """The first start's admin key, on stdout and never through the log (the one secret tidegate shows)."""
    click.echo("No API key was configured; created an admin key for this gateway (shown only once):")
    click.echo(secret)
    click.echo(
        f"It logs in to the console at {base}/ui, calls the API (export TIDEGATE_API_KEY=...) and manages keys:"
        f" {cli_command()} keys create --name my-app --api-key ..."
    )
    sys.stdout.flush()


def _warn_about_providers(config: Config) -> None:
    """`check-config`'s provider probe at start, each problem a warning line: serve starts anyway (an
    upstream may come up later), on a thread of its own so that a slow upstream delays nothing."""
    from ..probe import probe

    def run() -> None:
        for p in config.providers.values():
            try:
                result = probe(p)
            except Exception as exc:  # a probe's own failure is one more warning, never a traceback
                click.echo(f"warning: provider {p.name}: could not be probed ({type(exc).__name__})", err=True)
                continue
            if not result.ok:
                click.echo(f"warning: provider {p.name}: {result.detail}", err=True)

    threading.Thread(target=run, name="provider-probe", daemon=True).start()


def _stop_cleanly(signum: int, frame: FrameType | None) -> None:
    """Exit 0 at once, as the default action would have died: no event loop teardown, whose
    cancelling of what is left (client tasks of the store, say) can wait forever."""
    sys.stdout.flush()
    sys.stderr.flush()
    terminal.give_back()
    os._exit(0)


@click.command("serve")
@click.option("--config", "config_path", type=click.Path(), default=None, help="TOML config file")
@click.option("--host", default=None, help="bind address (default: server.host)")
@click.option("--port", type=int, default=None, help="port (default: server.port)")
@click.option("--workers", type=int, default=None, help="worker processes (default: server.workers)")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int | None) -> None:
    """Start the gateway."""
    from ..server.runtime.run import run_server

    # What a stop signal does outside the server's own handling: before it runs, it ends the start;
    # after the server has stopped (the app's shutdown done), uvicorn raises the signal again for
    # the handler it found, and with the default one the process would die of its own SIGTERM
    # (exit status -15: `make: *** [serve] Terminated`)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_cleanly)
    terminal.take_foreground_from_make()  # Ctrl-C to the gateway alone: make then reports its exit 0
    config = load_or_fail(config_path)  # the one load and check: workers are handed its file (run_server)
    host = host or config.server.host
    port = config.server.port if port is None else port
    workers = workers or config.server.workers
    # several workers: a listening socket each (server/runtime/workers.py); the port is claimed before the
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
        _print_first_key(created, _base_url(host, port))
    _warn_about_providers(config)
    sys.exit(run_server(config, host, port, workers, claimed, _startup_line(config, host, port)))
