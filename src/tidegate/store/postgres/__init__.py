"""The PostgreSQL backend: its store (`store.py`) and its side of each concern, one module each."""

from ..backend import Backend
from .affinity import PostgresAffinity
from .cache import PostgresCache
from .console import PostgresConsole
from .owners import PostgresOwners
from .sessions import PostgresSessions
from .store import PostgresStore

BACKEND = Backend(
    name="postgres",
    store=PostgresStore,
    cache=PostgresCache,
    sessions=PostgresSessions,
    console=PostgresConsole,
    affinity=PostgresAffinity,
    owners=PostgresOwners,
)

__all__ = ["BACKEND", "PostgresStore"]
