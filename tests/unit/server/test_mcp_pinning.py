"""The MCP SDK's transport connects to the address the SSRF guard checked, not to a second lookup
(`mcp/pinned.py`): DNS answers that change between the check and the connection (rebinding) never
reach an internal address. The DNS answers are the test's (a resolver passed in, as a name server
would answer); the HTTP server, the client and the guard are real."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest

from tidegate.errors import InvalidRequest
from tidegate.mcp.guard import Address, check_server_url, vetted_addresses
from tidegate.mcp.pinned import PinnedTransport

LOOPBACK = ipaddress.ip_address("127.0.0.1")
PUBLIC = ipaddress.ip_address("93.184.216.34")


@asynccontextmanager
async def http_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback HTTP server that keeps each request's head and answers 200 `ok`."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], heads


class Answers:
    """A name server whose answer for a name changes after each lookup (the last one stays)."""

    def __init__(self, *answers: list[Address]) -> None:
        self.answers = list(answers)
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[Address]:
        self.lookups.append(host)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def test_the_connection_goes_to_the_checked_address_with_the_name_in_host() -> None:
    """`mcp.pinned.test` exists in no DNS: the request arrives only because the transport connected to
    the address its own check resolved, and the server sees the name it was called by."""
    async with http_server() as (port, heads):
        answers = Answers([LOOPBACK])
        transport = PinnedTransport((f"mcp.pinned.test:{port}",), answers)
        async with httpx2.AsyncClient(transport=transport) as client:
            r = await client.post(f"http://mcp.pinned.test:{port}/mcp", json={"jsonrpc": "2.0"})
        assert r.status_code == 200 and r.text == "ok"
        assert str(r.request.url) == f"http://mcp.pinned.test:{port}/mcp"  # the name, for the SDK's redirect rule
        assert answers.lookups == ["mcp.pinned.test"]
        assert len(heads) == 1 and f"host: mcp.pinned.test:{port}\r\n".encode() in heads[0].lower()


async def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_at_connection() -> None:
    """The request-time check saw a public address; by the time the SDK connects the name answers
    127.0.0.1, where a server is listening. Through a `*.` pattern an internal address never passes:
    the transport refuses, and nothing reaches the server."""
    async with http_server() as (port, heads):
        answers = Answers([PUBLIC], [LOOPBACK])
        allowed = (f"*.rebind.test:{port}",)
        url = f"http://mcp.rebind.test:{port}/mcp"
        first = await vetted_addresses(url, allowed, "server_url", answers)
        assert first == ("mcp.rebind.test", [PUBLIC])  # the first answer passes
        async with httpx2.AsyncClient(transport=PinnedTransport(allowed, answers)) as client:
            with pytest.raises(InvalidRequest) as refused:
                await client.post(url, json={})
        assert refused.value.error_code == "mcp_server_not_allowed"
        assert "private or reserved" in refused.value.message
        assert heads == []


async def test_addresses_are_tried_in_order_and_all_must_pass() -> None:
    """A name with two addresses: nothing listens on the first (::1 here has no server), the second
    answers; a name with one internal address among public ones is refused whole."""
    async with http_server() as (port, heads):
        answers = Answers([ipaddress.ip_address("::1"), LOOPBACK])
        async with httpx2.AsyncClient(transport=PinnedTransport((f"two.test:{port}",), answers)) as client:
            assert (await client.get(f"http://two.test:{port}/")).text == "ok"
        assert len(heads) == 1
        mixed = Answers([PUBLIC, LOOPBACK])
        with pytest.raises(InvalidRequest):
            await vetted_addresses(f"http://mixed.test:{port}/", (f"*.test:{port}",), "server_url", mixed)


async def test_every_request_is_checked_against_the_allowlist() -> None:
    """A URL the SDK is handed later (an SSE server's `endpoint` event) goes through the same check:
    another port on an allowed host is refused before any connection."""
    async with http_server() as (port, heads):
        transport = PinnedTransport((f"127.0.0.1:{port + 1}",))
        async with httpx2.AsyncClient(transport=transport) as client:
            with pytest.raises(InvalidRequest) as refused:
                await client.get(f"http://127.0.0.1:{port}/messages/")
        assert refused.value.error_code == "mcp_server_not_allowed" and heads == []


async def test_the_request_check_and_the_connection_check_are_one_rule() -> None:
    """`check_server_url` (the 400 before anything starts) refuses what the transport refuses."""
    for url, allowed in (
        ("http://169.254.169.254/mcp", ("169.254.169.254",)),  # metadata: even listed exactly
        ("http://127.0.0.1:9/mcp", ("*.example.com",)),
        ("http://user:pw@127.0.0.1:9/mcp", ("127.0.0.1:9",)),
    ):
        with pytest.raises(InvalidRequest):
            await check_server_url(url, allowed, "server_url")
        async with httpx2.AsyncClient(transport=PinnedTransport(allowed)) as client:
            with pytest.raises(InvalidRequest):
                await client.get(url)


@pytest.mark.parametrize(
    "answer",
    [
        "::169.254.169.254",
        "::ffff:0:a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "2001:0:4136:e378:8000:63bf:5601:5601",
        "64:ff9b:1::a9fe:a9fe",
    ],
)
async def test_a_name_answering_the_metadata_address_in_an_ipv6_spelling_never_passes(answer: str) -> None:
    """Even listed exactly (where an internal address may pass), an IPv6 address that is or carries
    169.254.169.254 is refused at the connection, and nothing is sent."""
    async with http_server() as (port, heads):
        answers = Answers([ipaddress.ip_address(answer)])
        allowed = (f"mcp.v6.test:{port}",)
        async with httpx2.AsyncClient(transport=PinnedTransport(allowed, answers)) as client:
            with pytest.raises(InvalidRequest) as refused:
                await client.get(f"http://mcp.v6.test:{port}/mcp")
        assert refused.value.error_code == "mcp_server_not_allowed" and heads == []


async def test_a_public_ipv6_address_carrying_a_private_one_is_internal() -> None:
    """6to4 of 10.0.0.1 through a `*.` pattern: internal, so refused (listed exactly it would pass)."""
    carrier = [ipaddress.ip_address("2002:a00:1::1")]
    with pytest.raises(InvalidRequest):
        await vetted_addresses("http://a.v6.test/", ("*.v6.test",), "server_url", Answers(carrier))
    assert await vetted_addresses("http://a.v6.test/", ("a.v6.test",), "server_url", Answers(carrier))
