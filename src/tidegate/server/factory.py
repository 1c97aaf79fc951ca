"""App factory for uvicorn (`--workers N` imports the app by name in each worker)."""

from __future__ import annotations

import logging
import os

from ..config.load import load_config
from .app import TidegateApp

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


def create_app() -> TidegateApp:
    configure_logging()
    return TidegateApp(load_config(os.environ.get("TIDEGATE_CONFIG") or None), settle_heap=True)
