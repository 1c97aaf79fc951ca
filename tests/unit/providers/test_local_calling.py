"""The local model's function calling, before the model: what a request's tools, tool choice and history
become (providers/local/tools.py). The model's own calls: tests/integration/test_local_tools.py."""

from __future__ import annotations

from typing import Any

import pytest

from tidegate.errors import ProviderFailure
from tidegate.providers.local import tools as local_tools

SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
TOOLS = [
    {"type": "function", "function": {"name": "shell", "description": "Runs a command.", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "noargs"}},
]
CALL = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}
HISTORY: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "List files."}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
]


def test_no_tools_or_none_is_a_plain_answer() -> None:
    assert local_tools.calling_of(None, None, HISTORY) is None
    assert local_tools.calling_of(TOOLS, "none", HISTORY) is None


def test_the_choice_and_the_call_the_history_ends_answering() -> None:
    calling = local_tools.calling_of(TOOLS, None, HISTORY)
    assert calling is not None and calling.choice == "auto"
    assert [f.name for f in calling.functions] == ["shell", "noargs"]
    assert calling.functions[1].parameters == {"type": "object", "properties": {}}
    assert local_tools.same_call(calling, "shell", '{ "cmd":  "ls" }')  # the same JSON, spaced otherwise
    assert not local_tools.same_call(calling, "shell", '{"cmd": "pwd"}')
    assert local_tools.calling_of(TOOLS, None, HISTORY[:2]).last_call is None  # type: ignore[union-attr]
    named = local_tools.calling_of(TOOLS, {"type": "function", "function": {"name": "noargs"}}, HISTORY)
    assert named is not None and named.choice == "noargs"
    assert local_tools.calling_of(TOOLS, "required", HISTORY).choice == "required"  # type: ignore[union-attr]
    with pytest.raises(ProviderFailure, match="tool_choice names no tool"):
        local_tools.calling_of(TOOLS, {"type": "function", "function": {"name": "other"}}, HISTORY)


def test_the_grammar_allows_a_message_or_the_functions_only() -> None:
    calling = local_tools.calling_of(TOOLS, None, [])
    assert calling is not None
    assert local_tools.choice_grammar(calling) == 'root ::= "message:" | "functions.shell:" | "functions.noargs:"\n'
    assert local_tools.choice_grammar(calling, allow_message=False) == (
        'root ::= "functions.shell:" | "functions.noargs:"\n'
    )
    section = local_tools.system_section(calling)
    assert "functions.shell:\nRuns a command.\n" in section and '"required": ["cmd"]' in section


def test_the_history_shows_the_call_and_then_its_result() -> None:
    assert local_tools.history(HISTORY) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "List files."},
        {"role": "assistant", "content": 'functions.shell:\n{"cmd": "ls"}'},
        {"role": "user", "content": "functions.shell returned:\na.txt"},
    ]
    spoken = [{"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]}]
    assert local_tools.history(spoken)[0]["content"] == 'message:\nLet me look.\nfunctions.shell:\n{"cmd": "ls"}'
    said = [{"role": "assistant", "content": "Hi."}]
    assert local_tools.history(said)[0]["content"] == "message:\nHi."
    assert local_tools.history(said, marked=False)[0]["content"] == "Hi."  # a request without tools
