"""The `/v1/responses` request fields beyond input and tools: what each one becomes (docs/agents.md).

Every field of the Responses API reference (openai-python's `ResponseCreateParamsBase`) is one of:
- read or translated by tidegate on every route (`model`, `input`, `instructions`, `stream`,
  `max_output_tokens`, `temperature`, `top_p`, `tools`, `tool_choice`, `parallel_tool_calls`,
  `reasoning`, `text`, `include`, `metadata`, and tidegate's `provider`);
- a hint that cannot change the answer, accepted on every route (`HINTS`): passed on to a route that
  takes it (a Responses API route gets the body as sent; a chat route gets `prompt_cache_key`,
  `safety_identifier` and `user`; the Anthropic kinds get `user` / `safety_identifier` as
  `metadata.user_id`), otherwise left out on purpose;
- honoured only by a route that speaks the Responses API (`ONLY`, and any field this table does not
  know): kept in `AsSent.only`, and every other route refuses the request naming it
  (providers/fidelity.py). A value that asks for nothing (`background: false`, `truncation:
  "disabled"`, `service_tier: "auto"`, ...) is not a use of the field.
"""

from __future__ import annotations

from typing import Any

from ....errors import InvalidRequest, quote
from ...validate import opt_dict, opt_str

READ = frozenset(
    {
        "model",
        "input",
        "instructions",
        "stream",
        "provider",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning",
        "text",
        "include",
        "metadata",
    }
)
# cannot change the answer: `max_tool_calls` bounds built-in (hosted) tool calls, which a translated
# route never makes; `stream_options.include_obfuscation` pads deltas tidegate never pads
HINTS = frozenset(
    {
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "client_metadata",
        "safety_identifier",
        "user",
        "store",
        "max_tool_calls",
        "stream_options",
    }
)
ONLY = frozenset(
    {
        "previous_response_id",
        "conversation",
        "background",
        "background_options",
        "context_management",
        "moderation",
        "access_programs",
        "image",
        "prompt",
        "top_logprobs",
        "truncation",
        "service_tier",
    }
)
# values that ask for nothing: not a use of the field
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "background": (False,),
    "truncation": ("disabled",),
    "service_tier": ("auto", "default"),
    "top_logprobs": (0,),
    "context_management": ([],),
}
INCLUDABLE = (
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
)
VERBOSITY = ("low", "medium", "high")


def only_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The fields only a Responses API route can honour, by name (unknown fields among them)."""
    out: dict[str, Any] = {}
    for name, value in body.items():
        if name in READ or name in HINTS or value is None:
            continue
        if value in NEUTRAL.get(name, ()):
            continue
        out[name] = value
    return out


def text_format(body: dict[str, Any], only: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """`text` → (its echo, the chat `response_format` it asks for). `format` json_schema / json_object
    is the route's structured output (as `response_format` on the chat door); `verbosity` other than
    the default `medium` goes to `only`."""
    text = opt_dict(body, "text")
    if text is None:
        return None, None
    for name in text:
        if name not in ("format", "verbosity"):
            raise InvalidRequest(f"'text.{name}' is not supported; use text.format and text.verbosity")
    verbosity = opt_str(text, "verbosity")
    if verbosity is not None and verbosity not in VERBOSITY:
        raise InvalidRequest(f"'text.verbosity' must be one of {', '.join(VERBOSITY)}")
    if verbosity not in (None, "medium"):
        only["text.verbosity"] = verbosity
    fmt = text.get("format")
    echo: dict[str, Any] = {"format": fmt if fmt is not None else {"type": "text"}}
    if verbosity is not None:
        echo["verbosity"] = verbosity
    if fmt is None:
        return echo, None
    if not isinstance(fmt, dict):
        raise InvalidRequest("'text.format' must be an object with a 'type'")
    ftype = fmt.get("type")
    if ftype == "text":
        return echo, None
    if ftype == "json_object":
        return echo, {"type": "json_object"}
    if ftype != "json_schema":
        raise InvalidRequest(f"'text.format.type' must be text, json_object or json_schema, got {quote(ftype)}")
    schema_name, schema = fmt.get("name"), fmt.get("schema")
    if not isinstance(schema_name, str) or not schema_name:
        raise InvalidRequest("'text.format.name' is required for json_schema")
    if not isinstance(schema, dict):
        raise InvalidRequest("'text.format.schema' must be a JSON Schema object")
    spec: dict[str, Any] = {"name": schema_name, "schema": schema}
    for key in ("description", "strict"):
        if fmt.get(key) is not None:
            spec[key] = fmt[key]
    return echo, {"type": "json_schema", "json_schema": spec}


def check_include(body: dict[str, Any]) -> list[str]:
    """`include`: every value the API defines is accepted; a route adds what it can produce
    (`reasoning.encrypted_content`: the provider's thinking signatures or encrypted thinking)."""
    raw = body.get("include")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("'include' must be an array of strings")
    for i, value in enumerate(raw):
        if value not in INCLUDABLE:
            raise InvalidRequest(f"'include[{i}]' {quote(value)} is not supported; supported: {', '.join(INCLUDABLE)}")
    return list(raw)


def check_hints(body: dict[str, Any]) -> None:
    """The hints' types, as the API checks them (a hint of the wrong type is still a 400)."""
    for name in ("prompt_cache_key", "safety_identifier", "user", "prompt_cache_retention"):
        opt_str(body, name)
    client_metadata = opt_dict(body, "client_metadata")
    for key, value in (client_metadata or {}).items():
        if not isinstance(value, str):
            raise InvalidRequest(f"'client_metadata.{key}' must be a string")
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise InvalidRequest("'store' must be a boolean")
