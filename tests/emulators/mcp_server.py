"""A real MCP server (the official SDK's MCPServer, formerly FastMCP) over streamable HTTP, run by the
MCP tests as a subprocess: `python mcp_server.py PORT` (`PORT sse`: the older HTTP+SSE transport, on
`/sse`). Tools: `add(a, b)`; `fail()` (a tool error);
`crash()` (the process exits mid-call: a server that dies during the gateway's loop); `slow()` (answers
after 0.3 s: a loop that is still running when its gateway is killed)."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("tidegate-test-tools")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return f"sum={a + b}"


@server.tool()
def fail(a: int = 0, b: int = 0) -> str:
    """Always fails."""
    raise ValueError("the fail tool always fails")


@server.tool()
def crash(a: int = 0, b: int = 0) -> str:
    """Ends the server process during the call."""
    os._exit(3)


@server.tool()
def slow(a: int = 0, b: int = 0) -> str:
    """Answers after 0.3 s."""
    time.sleep(0.3)
    return "slow done"


if __name__ == "__main__":
    if sys.argv[2:] == ["sse"]:
        server.run("sse", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
