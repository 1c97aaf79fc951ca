"""The one SSRF guard for MCP server URLs (docs/api.md §13).

A URL passes when its host (or host:port) matches `[mcp] allowed_hosts` **and** every address the name
resolves to is public. A private, loopback, link-local, reserved or cloud-metadata address passes only
when the operator listed that host exactly (not through a `*.` pattern): the operator then said this
internal server is meant. Metadata addresses never pass.

The check runs twice: once on the request (a refused server is a 400 before anything starts), and
again on every HTTP request the MCP SDK makes (`mcp/pinned.py`), which then connects to the very
address it checked. A name that resolves to a public address for the first check and to an internal
one a moment later (DNS rebinding) therefore never reaches the internal one. The SDK follows a
redirect only on the URL's own origin, and each hop is checked again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from ..errors import InvalidRequest, quote

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[Address]]]
METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
NOT_ALLOWED = "mcp_server_not_allowed"


def _refuse(message: str) -> InvalidRequest:
    return InvalidRequest(message, code=NOT_ALLOWED)


def _match(pattern: str, host: str, port: int) -> tuple[bool, bool]:
    """(matches, exactly): `exactly` when the pattern names this host itself, not a wildcard."""
    p_host, _, p_port = pattern.rpartition(":") if pattern.count(":") == 1 else (pattern, "", "")
    if p_port and int(p_port) != port:
        return False, False
    if p_host.startswith("*."):
        return host.endswith(p_host[1:]) and host != p_host[2:], False
    return p_host == host, True


def _internal(addr: Address) -> bool:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return not addr.is_global or addr.is_multicast


async def resolve(host: str, port: int) -> list[Address]:
    """The addresses `host` resolves to, in the system resolver's order (no duplicates)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise _refuse(f"the MCP server host {quote(host)} does not resolve ({exc.strerror or exc})") from None
    found = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    return list(dict.fromkeys(found))


def _allowed(url: str, allowed_hosts: tuple[str, ...], where: str) -> tuple[str, int, bool]:
    """(host, port, listed exactly) of a URL the allowlist admits; 400 otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidRequest(f"'{where}' is not a valid URL") from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidRequest(f"'{where}' must be an http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(f"'{where}' must not carry user info; send credentials in 'headers'")
    matches = [_match(p, host, port) for p in allowed_hosts]
    if not any(m for m, _ in matches):
        raise _refuse(
            f"the MCP server {quote(f'{host}:{port}')} is not in the gateway's [mcp] allowed_hosts; "
            "ask the operator to allow it"
        )
    return host, port, any(m and e for m, e in matches)


async def vetted_addresses(
    url: str, allowed_hosts: tuple[str, ...], where: str, resolver: Resolver = resolve
) -> tuple[str, list[Address]]:
    """(host, the addresses to connect to, in order) of a URL that may be called (see the module's
    rule): 400 `mcp_server_not_allowed` otherwise. One refused address refuses the name."""
    host, port, exact = _allowed(url, allowed_hosts, where)
    addresses = await resolver(host, port)
    if not addresses:
        raise _refuse(f"the MCP server host {quote(host)} does not resolve")
    for addr in addresses:
        if addr in METADATA or (_internal(addr) and not exact):
            raise _refuse(
                f"the MCP server {quote(host)} resolves to a private or reserved address; only a host "
                "listed exactly in [mcp] allowed_hosts may be internal"
            )
    return host, addresses


async def check_server_url(url: str, allowed_hosts: tuple[str, ...], where: str) -> None:
    """Raise 400 `mcp_server_not_allowed` unless `url` may be called (see the module's rule)."""
    await vetted_addresses(url, allowed_hosts, where)
