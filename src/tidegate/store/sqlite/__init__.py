"""The SQLite backend: its store (`store.py`) and its side of each concern, one module each."""

from ..backend import Backend
from .affinity import SQLiteAffinity
from .cache import SQLiteCache
from .console import SQLiteConsole
from .owners import SQLiteOwners
from .sessions import SQLiteSessions
from .store import SQLiteStore

BACKEND = Backend(
    name="sqlite",
    store=SQLiteStore,
    cache=SQLiteCache,
    sessions=SQLiteSessions,
    console=SQLiteConsole,
    affinity=SQLiteAffinity,
    owners=SQLiteOwners,
)

__all__ = ["BACKEND", "SQLiteStore"]
