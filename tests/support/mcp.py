"""A real MCP server (tests/emulators/mcp_server.py: the official SDK's server with a few tools) in a
process of its own, on a free loopback port, for the tests of the gateway's MCP tool calls."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.process import free_port, port_open

MCP_SERVER = Path(__file__).resolve().parents[1] / "emulators" / "mcp_server.py"


class McpProcess:
    def __init__(self, *transport: str) -> None:
        self.port = free_port()
        self.sse = transport == ("sse",)
        self.proc = subprocess.Popen(
            [sys.executable, str(MCP_SERVER), str(self.port), *transport],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", self.port):
            assert self.proc.poll() is None, "the MCP server exited at start"
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sse" if self.sse else f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
