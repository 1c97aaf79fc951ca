"""At DEBUG, no MCP message body reaches the log (docs/security.md, "What is logged"): the MCP
client library logs whole JSON-RPC messages at DEBUG, so `tidegate serve` keeps it at WARNING
whatever `TIDEGATE_LOG_LEVEL` says. A real gateway at DEBUG runs one tool call through a real MCP
server; neither the call's arguments, its output nor the client's MCP header are in the log."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.mcp import McpProcess
from tests.support.process import sqlite_url, start_server


def test_mcp_messages_stay_out_of_a_debug_log(tmp_path: Path) -> None:
    secret = f"Bearer mcp-secret-{uuid.uuid4().hex}"
    mcp = McpProcess()
    with OpenAIUpstream() as upstream:
        config = tidegate_toml(
            sqlite_url(tmp_path),
            {"emu": {"kind": "openai", "base_url": upstream.base_url}},
            {"m/agent": [("emu", "mcp-agent")]},
        )
        config += f'[mcp]\nallowed_hosts = ["127.0.0.1:{mcp.port}"]\n'
        server = start_server(tmp_path / "gw", config, extra_env={"TIDEGATE_LOG_LEVEL": "DEBUG"})
        try:
            tool = {
                "type": "mcp",
                "server_label": "calc",
                "server_url": mcp.url,
                "require_approval": "never",
                "headers": {"Authorization": secret},
            }
            body = {"model": "m/agent", "input": "call add", "tools": [tool]}
            r = httpx.post(server.base_url + "/v1/responses", json=body, headers=server.headers, timeout=60)
            assert r.status_code == 200, r.text
            assert "sum=5" in r.text  # the tool ran
        finally:
            server.stop()
            mcp.stop()
    log = server.log()
    assert "tidegate.mcp:" in log  # the call is logged: its size and duration
    for body_text in ("sum=5", '"a": 2', "jsonrpc", "inputSchema", secret):
        assert body_text not in log, body_text
