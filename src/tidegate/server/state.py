"""Process-wide state of one server worker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..config.model import Config
from ..gateway.cache import ResponseCache
from ..gateway.generation import Gateway
from ..gateway.leases import Leases
from ..keys import Authenticator
from ..store.base import GenerationStore
from ..store.console import ConsoleStore
from ..store.owners import OwnerStore


@dataclass(slots=True)
class AppState:
    config: Config
    store: GenerationStore
    gateway: Gateway
    auth: Authenticator
    leases: Leases
    console: ConsoleStore  # what the web console reads at scale (store/console.py)
    cache: ResponseCache | None = None  # the response cache, made at its first use (server/door.py)
    owners: OwnerStore | None = None  # conversation owners, made at their first use (doors/responses/owners.py)
    ready: bool = False
    console_secret: bytes = b""  # signs console sessions; read from the store at startup (admin/console.py)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
