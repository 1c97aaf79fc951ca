"""The store a `store.url` names, by its scheme. Apart from `base.py` (the protocol and the record
types), so the concrete stores import `base.py` and nothing imports them back."""

from __future__ import annotations

from ..store_url import store_backend
from .backends import backend
from .base import GenerationStore


def open_store(url: str) -> GenerationStore:
    """The store for `url` (`sqlite://`, `redis://` / `rediss://`, `postgresql://` / `postgres://`)."""
    name = store_backend(url)
    if name is None:
        raise ValueError(f"store.url: scheme not available in this build: {url.split('://')[0]}")
    store: GenerationStore = backend(name).store(url)
    return store
