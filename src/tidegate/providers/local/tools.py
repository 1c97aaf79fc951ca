"""Function calling on the local model, with llama.cpp's grammars (docs/local-agents.md).

The technique is llama-cpp-python's own `chatml-function-calling` chat format, built here from the
library's public pieces (`LlamaGrammar.from_string`, `LlamaGrammar.from_json_schema`) because that
format drops `tool` messages: the functions are listed in the system message, the model first picks
`message:` or `functions.<name>:` under a grammar that allows nothing else (greedy, as the library
does: a choice between two continuations, not a sample), then writes the arguments under a grammar
made from the function's JSON schema. What the model picked and wrote is the tool call; the gateway
adds nothing to it. Tool results in the history are shown to the model after the call they answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...errors import ProviderFailure

MESSAGE = "message:"
# the first step writes `message:` or `functions.<name>:`, a few tokens
CHOICE_TOKENS = 48
# a call's arguments: a small model can start a string it never closes (the grammar allows any length)
ARGUMENT_TOKENS = 256


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Calling:
    """What a request with tools asks of the local model: its functions and how it may use them."""

    functions: tuple[Function, ...]
    choice: str  # auto | required | a function's name
    last_call: tuple[str, str] | None  # (name, arguments) of the call the history ends answering


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [str(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "".join(parts)


def calling_of(tools: list[dict[str, Any]] | None, tool_choice: Any, messages: list[dict[str, Any]]) -> Calling | None:
    """The request's functions, or None when the model is to answer with a message only."""
    if not tools or tool_choice == "none":
        return None
    functions = []
    for tool in tools:
        fn = tool.get("function") if tool.get("type") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        schema = params if isinstance(params, dict) and params else {"type": "object", "properties": {}}
        functions.append(Function(fn["name"], str(fn.get("description") or ""), schema))
    if not functions:
        return None
    choice = "auto"
    if tool_choice == "required":
        choice = "required"
    elif isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if name not in {f.name for f in functions}:
            raise ProviderFailure(
                "invalid_request", f"tool_choice names no tool: {name!r}", status=400, retriable=False
            )
        choice = name
    return Calling(tuple(functions), choice, _last_call(messages))


def _last_call(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The call whose result ends the history: the model is not asked to make it again."""
    if not messages or messages[-1].get("role") != "tool":
        return None
    for message in reversed(messages):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            fn = calls[-1].get("function") or {}
            return str(fn.get("name")), _canonical(str(fn.get("arguments") or "{}"))
    return None


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def same_call(calling: Calling, name: str, arguments: str) -> bool:
    return calling.last_call == (name, _canonical(arguments))


def system_section(calling: Calling) -> str:
    """The functions as the system message lists them (llama-cpp-python's wording)."""
    listed = "".join(
        f"\nfunctions.{f.name}:\n{(f.description + chr(10)) if f.description else ''}{json.dumps(f.parameters)}\n"
        for f in calling.functions
    )
    return (
        "\n\nYou have access to the following functions:\n"
        f"{listed}"
        "\n\nYou can respond to users messages with either a single message or one or more function calls."
        "\n\nTo respond with a message begin the message with 'message:', use the following format:"
        "\n\nmessage:\n<message>"
        "\n\nTo respond with one or more function calls begin the message with 'functions.<function_name>:',"
        " use the following format:"
        '\n\nfunctions.<function_name>:\n{ "arg1": "value1", "arg2": "value2" }'
    )


def history(messages: list[dict[str, Any]], marked: bool = True) -> list[dict[str, str]]:
    """The conversation in the template's roles: a call as the model writes one, a result after it.
    `marked`: an assistant's text carries the `message:` marker (the request offers functions)."""
    names: dict[str, str] = {}
    out: list[dict[str, str]] = []
    for m in messages:
        role = m.get("role", "user")
        if role == "developer":
            role = "system"
        if role == "tool":
            name = names.get(str(m.get("tool_call_id")), "function")
            out.append({"role": "user", "content": f"functions.{name} returned:\n{_text(m.get('content'))}"})
            continue
        text = _text(m.get("content"))
        calls = m.get("tool_calls") if role == "assistant" else None
        if calls:
            written = []
            for call in calls:
                fn = call.get("function") or {}
                names[str(call.get("id"))] = str(fn.get("name"))
                written.append(f"functions.{fn.get('name')}:\n{fn.get('arguments') or '{}'}")
            text = (f"{MESSAGE}\n{text}\n" if text else "") + "\n".join(written)
        elif role == "assistant" and text and marked:
            text = f"{MESSAGE}\n{text}"
        out.append({"role": role, "content": text})
    return out


def choice_grammar(calling: Calling, allow_message: bool = True) -> str:
    """GBNF for the first step: `message:` or one of the functions, nothing else."""
    names = " | ".join(json.dumps(f"functions.{f.name}:") for f in calling.functions)
    options = f'"{MESSAGE}" | {names}' if allow_message else names
    return f"root ::= {options}\n"


def function_named(calling: Calling, name: str) -> Function:
    return next(f for f in calling.functions if f.name == name)
