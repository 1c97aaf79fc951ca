"""Connections to the request's MCP servers through the official SDK: streamable HTTP, or the older
HTTP+SSE transport for a `server_url` whose path ends in `/sse` (the path such servers serve it on).

One `McpServers` per request, entered and left by the task that runs the loop (the SDK's transport
runs an anyio task group that must close where it opened). Every server operation is bounded by
`call_timeout_s`; every failure becomes an `McpFailure` whose message names the server and never
carries the client's headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the SDK (and its dependencies, ~30 MB) loads with the first MCP request, not at start
    import mcp_types
    from mcp.client.session import ClientSession

from .tools import McpServerSpec

log = logging.getLogger("tidegate.mcp")
# chat tool names must match this (OpenAI function names); MCP names that do not are renamed
TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")
MAX_PAGES = 20


class McpFailure(Exception):
    """A server that did not answer, answered badly, or timed out."""


@dataclass(frozen=True, slots=True)
class McpTool:
    server: McpServerSpec
    name: str  # the MCP server's own name for it
    exposed: str  # the name the model sees (unique across the request's servers)
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None

    def chat_tool(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.exposed, "parameters": self.input_schema}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    def listed(self) -> dict[str, Any]:
        """The tool in an `mcp_list_tools` output item (OpenAI's shape)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


def _text_of(result: mcp_types.CallToolResult) -> str:
    import mcp_types

    parts = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
    if not parts and result.structured_content is not None:
        import orjson

        return orjson.dumps(result.structured_content).decode()
    return "\n".join(parts)


class McpServers:
    def __init__(self, specs: list[McpServerSpec], call_timeout_s: float, allowed_hosts: tuple[str, ...]) -> None:
        self.specs = specs
        self.allowed_hosts = allowed_hosts  # checked again on every HTTP request, pinned (mcp/pinned.py)
        self.timeout = call_timeout_s
        self.sessions: dict[str, ClientSession] = {}
        self.tools: dict[str, McpTool] = {}  # by exposed name
        self.listed: dict[str, list[McpTool]] = {}  # by server label, in the server's order
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> McpServers:
        try:
            for spec in self.specs:
                await self._connect(spec)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self._stack.aclose()
        except BaseException as err:  # a dead server's transport may fail while closing: already over
            if isinstance(err, asyncio.CancelledError) and asyncio.current_task() is not None:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
            log.debug("closing the MCP sessions failed", exc_info=True)

    async def _connect(self, spec: McpServerSpec) -> None:
        import httpx2
        import mcp_types
        from mcp.client.session import ClientSession
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        from .pinned import pinned_client

        client_factory = functools.partial(pinned_client, self.allowed_hosts)
        try:
            async with asyncio.timeout(self.timeout):
                if urlsplit(spec.url).path.rstrip("/").endswith("/sse"):
                    transport = sse_client(
                        spec.url, headers=spec.headers, timeout=self.timeout, httpx_client_factory=client_factory
                    )
                else:
                    client = await self._stack.enter_async_context(
                        client_factory(headers=spec.headers, timeout=httpx2.Timeout(self.timeout))
                    )
                    transport = streamable_http_client(spec.url, http_client=client)
                read, write = await self._stack.enter_async_context(transport)
                session = await self._stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools: list[mcp_types.Tool] = []
                cursor: str | None = None
                for _ in range(MAX_PAGES):
                    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_tools(params=params)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except TimeoutError:
            raise McpFailure(f"MCP server '{spec.label}' did not answer within {self.timeout:g} s") from None
        except Exception as exc:
            raise McpFailure(f"MCP server '{spec.label}' could not be reached: {_describe(exc)}") from None
        self.sessions[spec.label] = session
        listed: list[McpTool] = []
        for tool in tools:
            if spec.allowed_tools is not None and tool.name not in spec.allowed_tools:
                continue
            exposed = TOOL_NAME.sub("_", tool.name)[:64]
            if exposed in self.tools:
                exposed = TOOL_NAME.sub("_", f"{spec.label}__{tool.name}")[:64]
            annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
            mt = McpTool(spec, tool.name, exposed, tool.description, dict(tool.input_schema), annotations)
            self.tools[exposed] = mt
            listed.append(mt)
        self.listed[spec.label] = listed

    async def call(self, tool: McpTool, arguments: dict[str, Any]) -> tuple[str | None, str | None]:
        """(output, error) of one tools/call; never raises for the server's sake."""
        label = tool.server.label
        try:
            async with asyncio.timeout(self.timeout):
                result = await self.sessions[label].call_tool(tool.name, arguments)
        except TimeoutError:
            return None, f"MCP server '{label}' did not answer tools/call '{tool.name}' within {self.timeout:g} s"
        except Exception as exc:
            return None, f"MCP server '{label}' failed tools/call '{tool.name}': {_describe(exc)}"
        text = _text_of(result)
        if result.is_error:
            return None, text or f"tool '{tool.name}' reported an error"
        return text, None


def _describe(exc: BaseException) -> str:
    """A short, header-free description of a transport failure (the first leaf of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
