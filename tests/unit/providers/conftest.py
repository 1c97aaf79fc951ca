from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The upstream HTTP client runs on uvloop in the server and on asyncio in embedders and tests:
    its socket tests run on both."""
    if item.module is not None and item.module.__name__.endswith(("test_http_client", "test_upstream_connections")):  # type: ignore[attr-defined]
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
