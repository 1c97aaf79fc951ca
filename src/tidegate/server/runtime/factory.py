"""The app a worker serves, made from the config it loaded once: the same object gives the guard its
limits. `create_app` is the factory uvicorn's own multiprocess mode imports by name in each worker
(`tidegate serve --workers N` where `SO_REUSEPORT` does not spread connections)."""

from __future__ import annotations

import logging
import os

from ...config.load import load_config
from ...config.model import Config
from ..app import TidegateApp
from .guard import use_limits

# Libraries whose DEBUG output carries secrets or bodies: botocore logs the canonical request it
# signs (the AWS session token among its headers), HTTP clients log headers, the MCP client logs
# every JSON-RPC message whole (tool arguments and results). `TIDEGATE_LOG_LEVEL=DEBUG` is
# tidegate's own debug output; these stay at WARNING whatever it says.
QUIET_LIBRARIES = (
    "botocore",
    "boto3",
    "urllib3",
    "google",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "httpx_sse",
    "mcp",
    "sse_starlette",
    "asyncio",
    "hpack",
)


def configure_logging() -> None:
    logging.basicConfig(level=os.environ.get("TIDEGATE_LOG_LEVEL", "INFO"))
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


def build_app(config: Config) -> TidegateApp:
    """A server worker's app and the guard's limits, both from `config`."""
    configure_logging()
    use_limits(config.server)
    return TidegateApp(config, settle_heap=True)


def create_app() -> TidegateApp:
    """For uvicorn's import by name: the config `tidegate serve` names in `$TIDEGATE_CONFIG`."""
    return build_app(load_config(os.environ.get("TIDEGATE_CONFIG") or None))
