"""App factory for uvicorn (`--workers N` imports the app by name in each worker)."""

from __future__ import annotations

import logging
import os

from ..config import load_config
from .app import TidegateApp


def create_app() -> TidegateApp:
    logging.basicConfig(level=os.environ.get("TIDEGATE_LOG_LEVEL", "INFO"))
    return TidegateApp(load_config(os.environ.get("TIDEGATE_CONFIG") or None), settle_heap=True)
