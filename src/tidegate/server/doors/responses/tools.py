"""Responses API tools → chat-shaped tools for translated routes (docs/agents.md).

- `function` tools are chat functions as they are.
- `custom` tools (free-form input) become a function with one string parameter, `input`; a grammar
  (`format: {type: grammar, syntax, definition}`) goes to the model in the description (a translated
  model is not constrained by it). The model's call comes back as a `custom_tool_call` whose `input`
  is that string.
- `namespace` tools group functions (and custom tools): each member becomes one flat function named
  `<namespace>__<name>`, and a call to it comes back as the member's own name with its `namespace`.
- Hosted tools (`web_search`, `file_search`, ...) run on OpenAI's side: only a route that speaks the
  Responses API can serve them. They are kept in `ResponsesTools.hosted` by their place `tools[i]`;
  providers/fidelity.py refuses them on other routes unless the model drops them.
- `mcp` tools never reach this module: the door runs them itself (server/buffered.py).
"""

from __future__ import annotations

from typing import Any

from ....errors import InvalidRequest, quote
from ....request import ToolRef

NAMESPACE_JOIN = "__"
# the Responses API's hosted tools (openai-python's `ToolParam`): run by OpenAI, not by the client
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "computer",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "programmatic_tool_calling",
        "tool_search",
        "local_shell",
        "shell",
        "apply_patch",
    }
)


class Tools:
    """The converted `tools`: what the response object echoes, the chat tools, the name map and the
    hosted tools (`tools[i]` → type)."""

    def __init__(self) -> None:
        self.echo: list[dict[str, Any]] = []
        self.chat: list[dict[str, Any]] = []
        self.refs: dict[str, ToolRef] = {}
        self.hosted: dict[str, str] = {}

    def _add(self, flat: str, ref: ToolRef, function: dict[str, Any], where: str) -> None:
        if flat in self.refs:
            raise InvalidRequest(f"'{where}' repeats the tool name {quote(flat)}")
        self.refs[flat] = ref
        self.chat.append({"type": "function", "function": {**function, "name": flat}})

    def function(self, tool: dict[str, Any], where: str, namespace: str | None = None) -> None:
        name = _name(tool, where)
        params = tool.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"'{where}.parameters' must be a JSON Schema object")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidRequest(f"'{where}.description' must be a string")
        strict = tool.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidRequest(f"'{where}.strict' must be a boolean")
        function: dict[str, Any] = {"parameters": params or {"type": "object", "properties": {}}}
        if description is not None:
            function["description"] = description
        if strict is not None:
            function["strict"] = strict
        self._add(_flat(name, namespace), ToolRef("function", name, namespace), function, where)

    def custom(self, tool: dict[str, Any], where: str, namespace: str | None = None) -> None:
        name = _name(tool, where)
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidRequest(f"'{where}.description' must be a string")
        about = description or f"The {name} tool."
        fmt = tool.get("format")
        if fmt is not None:
            if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
                raise InvalidRequest(f"'{where}.format.type' must be text or grammar")
            if fmt["type"] == "grammar":
                syntax, definition = fmt.get("syntax"), fmt.get("definition")
                if syntax not in ("lark", "regex") or not isinstance(definition, str):
                    raise InvalidRequest(f"'{where}.format' must have syntax lark or regex and a definition")
                about += f"\n\nThe input must follow this {syntax} grammar:\n{definition}"
        schema = {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "the tool's free-form input"}},
            "required": ["input"],
            "additionalProperties": False,
        }
        function = {"description": about, "parameters": schema}
        self._add(_flat(name, namespace), ToolRef("custom", name, namespace), function, where)

    def namespace(self, tool: dict[str, Any], where: str) -> None:
        name = _name(tool, where)
        members = tool.get("tools")
        if not isinstance(members, list) or not members:
            raise InvalidRequest(f"'{where}.tools' must be a non-empty array of function or custom tools")
        for j, member in enumerate(members):
            mw = f"{where}.tools[{j}]"
            mtype = member.get("type") if isinstance(member, dict) else None
            if mtype == "function":
                self.function(member, mw, name)
            elif mtype == "custom":
                self.custom(member, mw, name)
            else:
                raise InvalidRequest(f"'{mw}.type' must be function or custom, got {quote(mtype)}")


def _name(tool: dict[str, Any], where: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"'{where}.name' is required")
    return name


def _flat(name: str, namespace: str | None) -> str:
    return f"{namespace}{NAMESPACE_JOIN}{name}" if namespace else name


def flat_name(name: str, namespace: str | None) -> str:
    """The function name a translated route's model knows a (namespaced) tool by."""
    return _flat(name, namespace)


def convert_tools(raw: list[Any] | None) -> Tools:
    out = Tools()
    for i, tool in enumerate(raw or []):
        where = f"tools[{i}]"
        ttype = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or not isinstance(ttype, str):
            raise InvalidRequest(f"'{where}' must be an object with a 'type'")
        if ttype == "function":
            out.function(tool, where)
            out.echo.append(
                {
                    "type": "function",
                    "name": tool["name"],
                    "description": tool.get("description"),
                    "parameters": tool.get("parameters"),
                    "strict": tool.get("strict"),
                }
            )
            continue
        if ttype == "custom":
            out.custom(tool, where)
        elif ttype == "namespace":
            out.namespace(tool, where)
        elif ttype in HOSTED_TOOLS:
            out.hosted[where] = ttype
        else:
            kinds = "function, custom, namespace, mcp or a hosted tool (" + ", ".join(sorted(HOSTED_TOOLS)) + ")"
            raise InvalidRequest(f"'{where}.type' {quote(ttype)} is not a Responses tool type; use {kinds}")
        out.echo.append(tool)
    return out


def convert_tool_choice(raw: Any, tools: Tools) -> tuple[Any, Any, str | None]:
    """→ (the echo, the chat-shaped tool_choice, the name of a choice only a Responses route can honour)."""
    if raw is None:
        return "auto", None, None
    if raw in ("none", "auto", "required"):
        return raw, raw, None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise InvalidRequest("'tool_choice' must be 'none', 'auto', 'required' or a tool choice object")
    ctype = raw["type"]
    if ctype in ("function", "custom"):
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"'tool_choice.name' is required for type {ctype}")
        flat = flat_name(name, raw.get("namespace") if isinstance(raw.get("namespace"), str) else None)
        if flat not in tools.refs:
            raise InvalidRequest(f"'tool_choice.name' {quote(name)} names no tool in 'tools'")
        return raw, {"type": "function", "function": {"name": flat}}, None
    # allowed_tools, a hosted tool, mcp, apply_patch, shell: the Responses API's own choices
    return raw, None, "tool_choice"
