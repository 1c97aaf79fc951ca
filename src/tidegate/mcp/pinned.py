"""The MCP SDK's HTTP transport, pinned to the address the SSRF guard checked (`mcp/guard.py`).

Checking a name and then letting the HTTP client resolve it again leaves a gap: the second answer
may differ (DNS rebinding, or a short TTL that flips to 127.0.0.1). Here each request the SDK makes
is checked at the moment it is sent, and the connection goes to the checked address itself: the URL's
host becomes that IP, while the `Host` header (set from the original URL) and the TLS server name
(`sni_hostname`, so the certificate is verified for the name) stay the server's name. One transport
serves one MCP server in one request, so a pooled connection never carries another name.

Loaded with the SDK on the first MCP request (httpx2 takes ~110 ms to import).
"""

from __future__ import annotations

import httpx2

from .guard import Resolver, resolve, vetted_addresses


class PinnedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, allowed_hosts: tuple[str, ...], resolver: Resolver = resolve) -> None:
        # trust_env off: a proxy would connect on its own resolution and void the check
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)
        self._allowed_hosts = allowed_hosts
        self._resolver = resolver

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        host, addresses = await vetted_addresses(str(url), self._allowed_hosts, "the MCP server URL", self._resolver)
        extensions = {**request.extensions, "sni_hostname": host} if url.scheme == "https" else request.extensions
        for i, address in enumerate(addresses):  # in the resolver's order, as a plain client would try them
            # a new request for the wire: the client keeps the original as `response.request`, so the
            # SDK judges a redirect against the name, not the address
            pinned = httpx2.Request(
                request.method,
                url.copy_with(host=str(address)),
                headers=request.headers,  # with `Host` as the client set it from the name
                stream=request.stream,  # (unread: a refused connect sends nothing)
                extensions=extensions,
            )
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx2.ConnectError:
                if i == len(addresses) - 1:
                    raise
        raise AssertionError("vetted_addresses returns at least one address")

    async def aclose(self) -> None:
        await self._inner.aclose()


def pinned_client(
    allowed_hosts: tuple[str, ...],
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """An httpx2 client whose every request goes through the guard; the signature of the SDK's
    `httpx_client_factory` once `allowed_hosts` is bound."""
    return httpx2.AsyncClient(
        headers=headers, timeout=timeout or httpx2.Timeout(30.0), auth=auth, transport=PinnedTransport(allowed_hosts)
    )
