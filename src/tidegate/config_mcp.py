"""The `[mcp]` table (CONTRACT §13): which MCP servers the gateway may call, and the loop's limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config_values import check_keys, positive, typed
from .errors import ConfigError


@dataclass(frozen=True, slots=True)
class McpConfig:
    # host or host:port patterns; `*.example.com` matches any subdomain. Empty: no MCP server allowed.
    allowed_hosts: tuple[str, ...] = ()
    max_turns: int = 8  # model turns per request, the last one included
    call_timeout_s: float = 30.0  # one tools/call (and the connect + tools/list of one server)
    deadline_s: float = 120.0  # the whole loop: every model turn and every call


def _pattern(where: str, value: Any) -> str:
    text = str(typed(where, value, str, "a string")).strip().lower()
    host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if not host or any(c in host for c in "/@ \t") or "*" in host.removeprefix("*."):
        raise ConfigError(f"{where}: {value!r} is not a host or host:port pattern (e.g. 'mcp.example.com:443')")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"{where}: the port of {value!r} must be 1-65535")
    return text


def parse_mcp(raw: dict[str, Any]) -> McpConfig:
    check_keys("mcp", raw, set(McpConfig.__dataclass_fields__))
    d = McpConfig()
    hosts = typed("mcp.allowed_hosts", raw.get("allowed_hosts", []), list, "a list of host patterns")
    turns = typed("mcp.max_turns", raw.get("max_turns", d.max_turns), int, "an integer")
    if isinstance(turns, bool) or not 1 <= turns <= 64:
        raise ConfigError(f"mcp.max_turns: must be 1-64, got {turns}")
    return McpConfig(
        allowed_hosts=tuple(_pattern(f"mcp.allowed_hosts[{i}]", h) for i, h in enumerate(hosts)),
        max_turns=int(turns),
        call_timeout_s=positive("mcp.call_timeout_s", raw.get("call_timeout_s", d.call_timeout_s)),
        deadline_s=positive("mcp.deadline_s", raw.get("deadline_s", d.deadline_s)),
    )
