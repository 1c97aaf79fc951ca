"""Each store's side for a concern kept apart from `GenerationStore` (the cache, agent sessions, the
console, route affinity, conversation owners): one small protocol per concern in its own module, one class per store in
`<store>_<concern>.py`, and here the one place that picks the class for the open store. Kept apart
from the protocol modules so that no module both names a protocol and imports its implementations
(an import circle). Each backend's module is imported only when used."""

from __future__ import annotations

import importlib
from typing import Any, cast

from .affinity import AffinityStore
from .cache import CacheStore
from .console import ConsoleStore
from .owners import OwnerStore
from .sessions import SessionStore

# the store class's name -> the prefix of its concern modules and classes
_BACKENDS = {
    "SQLiteStore": ("sqlite", "SQLite"),
    "PostgresStore": ("postgres", "Postgres"),
    "RedisStore": ("redis", "Redis"),
}


def _facet(store: Any, concern: str, cls: str) -> Any:
    """`<backend>_<concern>.<Backend><cls>(store)` for the open store's backend."""
    kind = type(store).__name__
    if kind not in _BACKENDS:
        raise TypeError(f"no {concern} store for {kind}")
    module, prefix = _BACKENDS[kind]
    return getattr(importlib.import_module(f".{module}_{concern}", __package__), prefix + cls)(store)


def cache_store(store: Any) -> CacheStore:
    """The cache's storage over the store the gateway opened (the same connections)."""
    return cast(CacheStore, _facet(store, "cache", "Cache"))


def sessions_of(store: Any) -> SessionStore:
    return cast(SessionStore, _facet(store, "sessions", "Sessions"))


def console_of(store: Any) -> ConsoleStore:
    return cast(ConsoleStore, _facet(store, "console", "Console"))


def affinity_of(store: Any) -> AffinityStore:
    return cast(AffinityStore, _facet(store, "affinity", "Affinity"))


def owners_of(store: Any) -> OwnerStore:
    """Who owns each upstream conversation id (store/owners.py)."""
    return cast(OwnerStore, _facet(store, "owners", "Owners"))
