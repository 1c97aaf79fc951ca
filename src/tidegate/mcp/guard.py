"""The one SSRF guard for MCP server URLs (CONTRACT §13).

A URL passes when its host (or host:port) matches `[mcp] allowed_hosts` **and** every address the name
resolves to is public. A private, loopback, link-local, reserved or cloud-metadata address passes only
when the operator listed that host exactly (not through a `*.` pattern): the operator then said this
internal server is meant. Metadata addresses never pass. Redirects are not followed off the URL's
origin (the SDK's transport follows none), so the checked origin is the one called.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from ..errors import InvalidRequest, quote

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


def _internal(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return not addr.is_global or addr.is_multicast


async def _addresses(host: str, port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return {ipaddress.ip_address(host)}
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise _refuse(f"the MCP server host {quote(host)} does not resolve ({exc.strerror or exc})") from None
    return {ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos}


async def check_server_url(url: str, allowed_hosts: tuple[str, ...], where: str) -> None:
    """Raise 400 `mcp_server_not_allowed` unless `url` may be called (see the module's rule)."""
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
    exact = any(m and e for m, e in matches)
    for addr in await _addresses(host, port):
        if addr in METADATA or (_internal(addr) and not exact):
            raise _refuse(
                f"the MCP server {quote(host)} resolves to a private or reserved address; only a host "
                "listed exactly in [mcp] allowed_hosts may be internal"
            )
