"""The store a `store.url` names, by its scheme: the one scheme table, which the config check
(`config/load.py`), `store/open.py` and `tidegate db upgrade` all ask (a foundation: no layer above)."""

from __future__ import annotations

from typing import Literal

StoreBackend = Literal["sqlite", "redis", "postgres"]
_STORE_SCHEMES: dict[str, StoreBackend] = {
    "sqlite": "sqlite",
    "redis": "redis",
    "rediss": "redis",
    "postgresql": "postgres",
    "postgres": "postgres",
}


def store_backend(url: str) -> StoreBackend | None:
    """The store `url` names (None: no store has it)."""
    scheme, sep, _ = url.partition("://")
    return _STORE_SCHEMES.get(scheme) if sep else None
