"""What `tidegate serve` runs once it has loaded and checked the config and prepared the store: one
process serving the app made from that config, the Supervisor's workers on a shared port
(workers.py; each loads the config file once for itself), or, without `SO_REUSEPORT`, uvicorn's own
multiprocess mode (its workers import the app factory by name)."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
from typing import Any

import click
import uvicorn

from ...config.model import Config
from .factory import build_app
from .guard import GuardedHttpProtocol
from .server import GatewayServer
from .workers import STARTUP_FAILURE, Supervisor, WorkerSettings

# uvicorn's own multiprocess mode starts its workers itself: they find the app and the protocol by name
APP_FACTORY = "tidegate.server.runtime.factory:create_app"
GUARDED_HTTP = "tidegate.server.runtime.guard:GuardedHttpProtocol"  # httptools behind docs/api-edges.md §16


def uvicorn_options(config: Config) -> dict[str, Any]:
    """uvicorn's settings but the app, the protocol and the address."""
    return {
        "loop": "uvloop",
        "timeout_keep_alive": 5,  # an idle keep-alive connection closes after 5 s (docs/api-edges.md §16)
        "lifespan": "on",
        "access_log": False,
        "proxy_headers": False,  # nothing reads the client address or scheme: skip the per-request rewrite
        "server_header": False,  # no `server: uvicorn` on every answer (a header's two regex checks in uvicorn)
        "log_level": "warning",
        # a stop drains before the server's shutdown starts, a reload's hand-off (drain.py) during
        # it; tidegate's own server narrows this to what is left of the stop's bound (server.py)
        "timeout_graceful_shutdown": int(config.server.drain_s) + 2,
    }


def config_file(config: Config) -> str | None:
    """The file `config` was read from, absolute (a worker started later reads it again: a reload's
    workers see it as edited), or None for the embedded default."""
    return None if config.source.startswith("<") else os.path.abspath(config.source)


def run_server(config: Config, host: str, port: int, workers: int, claimed: socket.socket | None, banner: str) -> int:
    """Serve until stopped; the exit code (`STARTUP_FAILURE` when the server could not start).
    `claimed`: the port `claim_port` holds for `workers` processes of the Supervisor's."""
    options = uvicorn_options(config)
    if claimed is not None:
        settings = WorkerSettings(config_file(config), options)
        supervisor = Supervisor(settings, claimed, workers, config.server.worker_timeout_s, config.server.drain_s)
        return supervisor.run(banner)
    if workers > 1:  # uvicorn's own multiprocess mode (no SO_REUSEPORT here)
        source = config_file(config)
        if source is not None:
            os.environ["TIDEGATE_CONFIG"] = source
        click.echo(banner, err=True)
        uvicorn.run(APP_FACTORY, factory=True, http=GUARDED_HTTP, host=host, port=port, workers=workers, **options)
        return 0
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # every thread's stack to stderr, as a worker's
    app = build_app(config)
    uvicorn_config = uvicorn.Config(app, host=host, port=port, http=GuardedHttpProtocol, **options)
    server = GatewayServer(uvicorn_config, app.drain, banner)
    server.run()
    return 0 if server.started else STARTUP_FAILURE
