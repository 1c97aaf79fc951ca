"""`Backend`: what one store backend package exports (store/sqlite/, store/redis/, store/postgres/).

A backend is its store class plus its side of each concern kept apart from `GenerationStore` (the
cache, agent sessions, the console, route affinity, conversation owners), each a class built over the
open store (the same connections). Kept apart from the protocol modules so that no module both names
a protocol and imports its implementations (an import circle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..store_url import StoreBackend
from .affinity import AffinityStore
from .base import GenerationStore
from .cache import CacheStore
from .console import ConsoleStore
from .owners import OwnerStore
from .sessions import SessionStore

S = TypeVar("S", bound=GenerationStore)


@dataclass(frozen=True, slots=True)
class Backend(Generic[S]):
    """One backend; mypy checks that each concern's class takes this backend's store."""

    name: StoreBackend
    store: Callable[[str], S]  # the store for a `store.url` of this backend's scheme
    cache: Callable[[S], CacheStore]
    sessions: Callable[[S], SessionStore]
    console: Callable[[S], ConsoleStore]
    affinity: Callable[[S], AffinityStore]
    owners: Callable[[S], OwnerStore]
