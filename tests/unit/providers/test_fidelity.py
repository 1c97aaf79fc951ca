"""The fidelity table (providers/fidelity.py): what each kind refuses, the values that ask for nothing,
and docs/translation.md written from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidegate.providers import fidelity
from tidegate.providers.kinds import KINDS, translation_markdown
from tidegate.request import GenerationRequest, ReasoningOptions

DOC = Path(__file__).resolve().parents[3] / "docs" / "translation.md"
HI = [{"role": "user", "content": "hi"}]


def chat(**body: Any) -> GenerationRequest:
    """A chat-door request: its body as sent, and the fields the door parses that the table's rules read."""
    raw = {"model": "m", "messages": HI, **body}
    effort, asked = body.get("reasoning_effort"), body.get("reasoning")
    reasoning = ReasoningOptions(effort=effort, field="reasoning_effort") if effort else None
    if asked is not None:  # as the chat door parses it
        reasoning = ReasoningOptions(effort=asked.get("effort"), max_tokens=asked.get("max_tokens"))
    return GenerationRequest(
        model="m",
        messages=HI,
        raw_body=raw,
        response_format=body.get("response_format"),
        tools=body.get("tools"),
        reasoning=reasoning,
    )


def refused_field(kind: str, request: GenerationRequest) -> str | None:
    """What a route of `kind` refuses (its registry entry's fidelity table)."""
    return fidelity.refused_field(KINDS[kind].fidelity, request)


def test_the_doc_is_written_from_the_table() -> None:
    assert DOC.read_text() == translation_markdown(), "run: python -m tidegate.providers.kinds > docs/translation.md"


@pytest.mark.parametrize("kind", ["anthropic", "bedrock", "vertex"])
def test_the_anthropic_kinds(kind: str) -> None:
    assert refused_field(kind, chat(seed=1)) == "seed"
    assert refused_field(kind, chat(response_format={"type": "json_schema", "json_schema": {}})) == "response_format"
    json_object = {"type": "json_object"}
    assert refused_field(kind, chat(response_format=json_object)) is None  # a forced tool
    assert refused_field(kind, chat(response_format=json_object, tools=[{"type": "function"}])) == "response_format"
    assert refused_field(kind, chat(response_format=json_object, reasoning_effort="low")) == "response_format"
    assert refused_field(kind, chat(some_new_field=3)) == "some_new_field"  # unknown: refused, not dropped
    assert refused_field(kind, chat(temperature=0, top_p=0.5, stop=["x"], user="u", tool_choice="auto")) is None
    neutral = chat(seed=None, logprobs=False, n=1, frequency_penalty=0, response_format={"type": "text"})
    assert refused_field(kind, neutral) is None
    assert refused_field(kind, chat(stream=True, stream_options={"include_usage": True})) is None


def test_openai_passes_everything_and_local_takes_little() -> None:
    assert refused_field("openai", chat(seed=1, logprobs=True, anything=1)) is None
    assert refused_field("local", chat(seed=1, temperature=0.2)) is None
    # grammar-constrained function calling (providers/local/tools.py); an effort it meets by not thinking
    assert refused_field("local", chat(tools=[{"type": "function"}], tool_choice="auto")) is None
    assert refused_field("local", chat(reasoning_effort="high")) is None
    assert refused_field("local", chat(reasoning={"effort": "low"})) is None
    assert refused_field("local", chat(reasoning={"max_tokens": 2000})) == "reasoning"  # a budget, by its name
    marked = [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]
    cached = GenerationRequest(model="m", messages=marked, raw_body={"model": "m", "messages": marked})
    assert refused_field("local", cached) == "cache_control"
    assert refused_field("anthropic", cached) is None


def test_a_canonical_request_from_the_other_doors() -> None:
    """The Responses and native doors arrive without a chat body: their parsed fields count."""
    assert refused_field("anthropic", GenerationRequest(model="m", messages=HI, seed=3)) == "seed"
    thinking = GenerationRequest(model="m", messages=HI, reasoning=ReasoningOptions(effort="high"))
    assert refused_field("anthropic", thinking) is None
    assert refused_field("local", thinking) is None  # an effort: the local model meets it by not thinking
    budget = GenerationRequest(model="m", messages=HI, reasoning=ReasoningOptions(max_tokens=4096, field="thinking"))
    assert refused_field("local", budget) == "thinking"  # named as its door's client sent it
    assert refused_field("anthropic", budget) is None


def test_every_table_rows_chat_fields() -> None:
    for kind in KINDS.values():  # (every kind has a table: tests/unit/providers/test_kinds.py)
        assert set(kind.fidelity.fields) <= set(fidelity.CHAT_FIELDS), kind.name
