"""`tidegate check-config`'s reachability report (and `serve`'s start warnings): can each provider
be reached, does its base URL answer as its kind's API, is its secret set, can the store be used?

Never sends a generation: HTTP upstreams get a TCP connect to their host and port, then, for the
kinds that have one, their model list (`providers/listing.py`), named by the URL tried; the local
provider is checked for its model file and runtime. A secret variable that is not set is a
problem; secrets are reported as set or missing, never shown.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .addresses import refused_address
from .config.model import ProviderConfig

if TYPE_CHECKING:
    from .providers.kinds import Kind

CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class ProbeResult:
    provider: str
    ok: bool
    detail: str


def _tcp(url: str) -> tuple[bool, str]:
    """A TCP connect to the URL's host, to an address the config's rule allows (`addresses.py`): the
    name is resolved here once, every address checked, and the connect goes to a checked address, so
    a name that points at a metadata or link-local address is reported, never connected to."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return False, f"cannot resolve host {host} ({exc.strerror or 'no address'})"
    except OSError as exc:
        return False, f"unreachable ({host}:{port}: {type(exc).__name__})"
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    refusal = refused_address(host, addresses)
    if refusal is not None:
        return False, f"refused: {refusal}"
    failure: OSError | None = None
    for address in addresses:
        try:
            with socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S):
                return True, f"reachable ({host}:{port})"
        except OSError as exc:
            failure = exc
    return False, f"unreachable ({host}:{port}: {_reason(failure)})"


def _reason(failure: OSError | None) -> str:
    if isinstance(failure, TimeoutError):
        return f"no connection within {CONNECT_TIMEOUT_S:g} s"
    if failure is None:
        return "no address"
    return failure.strerror.lower() if failure.strerror else type(failure).__name__


def _secrets(p: ProviderConfig, kind: Kind) -> tuple[bool, list[str]]:
    """Whether every secret variable the provider names is set, and a note on each."""
    notes: list[str] = []
    ok = True
    for env in (p.api_key_env, p.access_token_env):
        if env:
            present = bool(os.environ.get(env))
            ok = ok and present
            notes.append(f"${env} {'set' if present else 'NOT SET'}")
    if kind.credentials is not None:
        notes.extend(kind.credentials(p))
    return ok, notes


def probe(p: ProviderConfig) -> ProbeResult:
    """What the provider's kind probes (its entry in providers/kinds.py): a file check of its own, or a
    TCP connect to its upstream URL, then its model list when the kind has one, plus its secrets."""
    from .providers.kinds import KINDS  # (imported when check-config probes, not with the CLI)

    kind = KINDS.get(p.kind)
    if kind is not None and kind.check is not None:
        ok, detail = kind.check(p)
        return ProbeResult(p.name, ok, detail)
    url = kind.upstream(p) if kind is not None and kind.upstream is not None else None
    if kind is None or url is None:
        return ProbeResult(p.name, False, f"no upstream URL for kind {p.kind!r}")
    ok, detail = _tcp(url)
    listing = kind.listing(p) if kind.listing is not None else None
    if not ok:
        detail = f"{detail}; tried {listing.url if listing is not None else url}"
    elif listing is not None:
        from .providers.listing import call_listing

        answer = asyncio.run(call_listing(p, listing))
        ok, detail = answer.ok, answer.detail
    secrets_ok, secrets = _secrets(p, kind)
    return ProbeResult(p.name, ok and secrets_ok, "; ".join([detail, *secrets]))


def _sqlite_writable(path: str) -> tuple[bool, str]:
    """The store creates the file and its directories on start, and WAL writes two files beside it: a
    file is made and removed in the directory that would hold them (as root, `os.access` says yes to
    everything, so it is tried, not asked)."""
    if path == ":memory:":
        return True, "in memory"
    target = Path(path).absolute()
    if target.is_dir():
        return False, f"{target} is a directory"
    if target.exists() and not os.access(target, os.W_OK):
        return False, f"{target} is not writable"
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return False, f"{parent} is not a directory"
    try:
        fd, probe_file = tempfile.mkstemp(prefix=".tidegate-check-", dir=parent)
        os.close(fd)
        os.unlink(probe_file)
    except OSError as exc:
        return False, f"cannot write in {parent} ({type(exc).__name__})"
    return True, f"writable ({target})"


async def _network_store(url: str) -> tuple[bool, str]:
    """A Redis PING or a PostgreSQL `SELECT 1`, nothing written; the URL is named by host:port only
    (it may hold a password)."""
    parts = urlsplit(url)
    where = f"{parts.hostname}:{parts.port or (5432 if url.startswith('postgres') else 6379)}"
    try:
        if url.startswith("redis"):
            from redis import asyncio as aioredis

            from .store.redis import RedisStore

            client = aioredis.Redis.from_url(RedisStore(url).url, socket_connect_timeout=CONNECT_TIMEOUT_S)
            try:
                await asyncio.wait_for(client.ping(), CONNECT_TIMEOUT_S)
            finally:
                await client.aclose()
        else:
            import asyncpg  # type: ignore[import-untyped]

            from .store.postgres import PostgresStore

            conn = await asyncpg.connect(PostgresStore(url).dsn, timeout=CONNECT_TIMEOUT_S)
            try:
                await conn.fetchval("SELECT 1", timeout=CONNECT_TIMEOUT_S)
            finally:
                await conn.close()
    except Exception as exc:  # every driver's own error tree: reported by class, never with the URL
        return False, f"unreachable ({where}: {type(exc).__name__})"
    return True, f"reachable ({where})"


def probe_store(url: str) -> ProbeResult:
    """Whether the configured store can be used: an SQLite file's directory writable, a Redis or
    PostgreSQL server answering."""
    scheme = url.split("://")[0]
    if scheme == "sqlite":
        from .store.sqlite import SQLiteStore

        ok, detail = _sqlite_writable(SQLiteStore(url).path)
    else:
        ok, detail = asyncio.run(_network_store(url))
    return ProbeResult(scheme, ok, detail)
