"""Each store's side for a concern kept apart from `GenerationStore` (the cache, agent sessions, the
console, route affinity, conversation owners): one small protocol per concern in its own module, one
class per backend in that backend's package (`store/<backend>/<concern>.py`), picked here through the
open store's `Backend` (store/backend.py)."""

from __future__ import annotations

from .affinity import AffinityStore
from .backends import backend
from .base import GenerationStore
from .cache import CacheStore
from .console import ConsoleStore
from .owners import OwnerStore
from .sessions import SessionStore


def cache_store(store: GenerationStore) -> CacheStore:
    """The cache's storage over the store the gateway opened (the same connections)."""
    return backend(store.backend_name).cache(store)


def sessions_of(store: GenerationStore) -> SessionStore:
    return backend(store.backend_name).sessions(store)


def console_of(store: GenerationStore) -> ConsoleStore:
    return backend(store.backend_name).console(store)


def affinity_of(store: GenerationStore) -> AffinityStore:
    return backend(store.backend_name).affinity(store)


def owners_of(store: GenerationStore) -> OwnerStore:
    """Who owns each upstream conversation id (store/owners.py)."""
    return backend(store.backend_name).owners(store)
