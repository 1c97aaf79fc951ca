"""The one SSRF guard for MCP server URLs (docs/api-operations.md §13).

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

from ..addresses import Address, address_of, canonical_host, embedded_ipv4, host_matches, is_metadata_address
from ..errors import InvalidRequest, quote

__all__ = ["Address", "Resolver", "check_server_url", "resolve", "vetted_addresses"]

Resolver = Callable[[str, int], Awaitable[list[Address]]]
NOT_ALLOWED = "mcp_server_not_allowed"


def _refuse(message: str) -> InvalidRequest:
    return InvalidRequest(message, code=NOT_ALLOWED)


def _internal(addr: Address) -> bool:
    """Not a public address, itself or any IPv4 address it carries (6to4, Teredo, NAT64...)."""
    return any(not a.is_global or a.is_multicast for a in (addr, *embedded_ipv4(addr)))


async def resolve(host: str, port: int) -> list[Address]:
    """The addresses `host` resolves to, in the system resolver's order (no duplicates); an address in
    any spelling (`addresses.address_of`) is itself, unwrapped, without asking the resolver."""
    literal = address_of(host)
    if literal is not None:
        return [literal]
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
    host = canonical_host(parts.hostname or "")
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidRequest(f"'{where}' must be an http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(f"'{where}' must not carry user info; send credentials in 'headers'")
    matches = [host_matches(p, host, port) for p in allowed_hosts]
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
        if is_metadata_address(addr) or (_internal(addr) and not exact):
            raise _refuse(
                f"the MCP server {quote(host)} resolves to a private or reserved address; only a host "
                "listed exactly in [mcp] allowed_hosts may be internal"
            )
    return host, addresses


async def check_server_url(url: str, allowed_hosts: tuple[str, ...], where: str) -> None:
    """Raise 400 `mcp_server_not_allowed` unless `url` may be called (see the module's rule)."""
    await vetted_addresses(url, allowed_hosts, where)
