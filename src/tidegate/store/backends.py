"""The backend packages by name: the one place that picks a store's backend. Each package is imported
only when its backend is used (the drivers of Redis and PostgreSQL are optional extras)."""

from __future__ import annotations

from typing import Any

from ..store_url import StoreBackend
from .backend import Backend


def backend(name: StoreBackend) -> Backend[Any]:
    if name == "sqlite":
        from .sqlite import BACKEND as SQLITE

        return SQLITE
    if name == "redis":
        from .redis import BACKEND as REDIS

        return REDIS
    from .postgres import BACKEND as POSTGRES

    return POSTGRES
