"""The request's `{"type": "mcp", ...}` tools (docs/api-operations.md §13), split from its function tools."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..config.model import ModelConfig
from ..errors import InvalidRequest, UpstreamError, quote
from ..header_rules import header_problem

MCP_FIELDS = frozenset(
    {"type", "server_label", "server_url", "headers", "allowed_tools", "require_approval", "server_description"}
)


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    label: str
    url: str
    # sent to this MCP server only; never logged, stored or echoed (`repr` hides them)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    allowed_tools: frozenset[str] | None = None

    def echo(self) -> dict[str, Any]:
        """The tool as the response object repeats it: no headers (they may hold credentials)."""
        return {
            "type": "mcp",
            "server_label": self.label,
            "server_url": self.url,
            "allowed_tools": sorted(self.allowed_tools) if self.allowed_tools is not None else None,
            "headers": None,
            "require_approval": "never",
        }


def _spec(tool: dict[str, Any], where: str) -> McpServerSpec:
    for name in tool:
        if name not in MCP_FIELDS:
            raise InvalidRequest(f"'{where}.{name}' is not supported on an mcp tool")
    approval = tool.get("require_approval", "never")
    if approval != "never":
        raise InvalidRequest(
            f"'{where}.require_approval' must be 'never': the gateway runs MCP tools without approvals",
            code="unsupported_parameter",
        )
    label, url = tool.get("server_label"), tool.get("server_url")
    if not isinstance(label, str) or not label or len(label) > 64:
        raise InvalidRequest(f"'{where}.server_label' is required (a string of at most 64 characters)")
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"'{where}.server_url' is required (connectors are not supported)")
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidRequest(f"'{where}.headers' must be an object of string values")
    for name, value in headers.items():
        if (problem := header_problem(name, value, ascii_only=True)) is not None:  # header_rules.py says why
            raise InvalidRequest(f"'{where}.headers': {problem}")
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):  # the filter form: {"tool_names": [...]}
        allowed = allowed.get("tool_names")
    if allowed is not None and (not isinstance(allowed, list) or not all(isinstance(n, str) for n in allowed)):
        raise InvalidRequest(f"'{where}.allowed_tools' must be a list of tool names")
    return McpServerSpec(label, url, dict(headers), frozenset(allowed) if allowed is not None else None)


def split_tools(body: Any) -> tuple[dict[str, Any], list[McpServerSpec]]:
    """(the body without its mcp tools, the MCP servers); the body is returned as it was when it has none."""
    if not isinstance(body, dict) or not isinstance(body.get("tools"), list):
        return body, []
    specs: list[McpServerSpec] = []
    others: list[Any] = []
    for i, tool in enumerate(body["tools"]):
        if isinstance(tool, dict) and tool.get("type") == "mcp":
            specs.append(_spec(tool, f"tools[{i}]"))
        else:
            others.append(tool)
    if not specs:
        return body, []
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise InvalidRequest(f"'tools': server_label values must be unique, got {quote(labels)}")
    rest = {k: v for k, v in body.items() if k != "tools"}
    if others:
        rest["tools"] = others
    return rest, specs


def server_tool_specs(model: ModelConfig) -> list[McpServerSpec]:
    """A model's `server_tools` as servers to call, their header values read from the environment now
    (a variable that is not set fails the request, naming the variable, never a value)."""
    specs: list[McpServerSpec] = []
    for tool in model.server_tools:
        headers: dict[str, str] = {}
        for name, var in tool.headers_env.items():
            value = os.environ.get(var)
            if not value:
                raise UpstreamError(
                    f"model {model.id!r}: MCP server {tool.server_label!r} needs header {name!r} from the "
                    f"environment variable {var}, which is not set",
                    code="mcp_server_error",
                )
            headers[name] = value
        allowed = frozenset(tool.allowed_tools) if tool.allowed_tools is not None else None
        specs.append(McpServerSpec(tool.server_label, tool.server_url, headers, allowed))
    return specs
