"""The Redis backend: its store (`store.py`) and its side of each concern, one module each."""

from ..backend import Backend
from .affinity import RedisAffinity
from .cache import RedisCache
from .console import RedisConsole
from .owners import RedisOwners
from .sessions import RedisSessions
from .store import RedisStore

BACKEND = Backend(
    name="redis",
    store=RedisStore,
    cache=RedisCache,
    sessions=RedisSessions,
    console=RedisConsole,
    affinity=RedisAffinity,
    owners=RedisOwners,
)

__all__ = ["BACKEND", "RedisStore"]
