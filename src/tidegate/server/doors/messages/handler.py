"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages API door (Claude
Code, the Anthropic SDKs; docs/agents.md).

Validated into a `GenerationRequest` (request.py), then served by server/door.py like every
generation door: idempotency, records, the identity headers, fallback before the first byte. The
stream is rendered by render/messages.py (keep-alives as `ping` events); a route of kind `anthropic`
gets the body and the `anthropic-*` headers as sent, and its events go back untouched. Errors before
the first byte use Anthropic's shape (`anthropic_error`, which the app installs for these paths).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from ....commit import Committed
from ....config.model import Config
from ....doors import Door
from ....errors import ModelNotFound, TidegateError, quote
from ....events import Event, Failed
from ....gateway.generation import Generation
from ....gateway.usage import count_tokens, estimate_prompt_tokens, quick_prompt_estimate, tokenizer_ready
from ....providers.kinds import speaking
from ....records import ApiKey
from ....render.messages import MessageBuilder, MessagesStreamRenderer
from ....request import WireFormat
from ...door import BuiltJson, DoorSpec, serve_generation
from ...http import Request
from ...state import AppState
from .request import MessagesRequest, parse_messages_request

# the request headers that say what a Messages request is (an `anthropic` route gets them as sent)
ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
# docs/api.md §4's statuses in Anthropic's error types (its API's errors reference)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
}


def anthropic_error(error: TidegateError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`; `code` beside them is tidegate's §4 code."""
    body = error.body()["error"]
    assert isinstance(body, dict)
    etype = ERROR_TYPES.get(error.status, "invalid_request_error" if error.status < 500 else "api_error")
    return {"type": "error", "error": {"type": etype, "message": body["message"], "code": body["code"]}}


def wants_anthropic_shape(req: Request) -> bool:
    """The Messages door's paths, and `GET /v1/models` from an Anthropic client (`anthropic-version`)."""
    path = req.path
    return path.startswith("/v1/messages") or (path == "/v1/models" and req.header("anthropic-version") is not None)


async def list_models(req: Request, config: Config) -> None:
    """`GET /v1/models` in Anthropic's list shape (its Models API): the catalog's generation models."""
    data = [
        {
            "type": "model",
            "id": m.id,
            "display_name": m.id,
            "created_at": "1970-01-01T00:00:00Z",  # (the catalog has no dates; the field is required)
            "lifecycle": "active",
            **({"max_input_tokens": m.context_length} if m.context_length else {}),
            **({"max_tokens": m.max_output_tokens} if m.max_output_tokens else {}),
        }
        for m in config.models.values()
        if m.type in ("chat", "router")
    ]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    await req.respond_json(200, {"data": data, "has_more": False, "first_id": first, "last_id": last})


class _MessagesStream:
    one_frame_per_event = False  # a text delta may open its block first
    comment_keepalives = False  # keep-alives are `ping` events (keepalive_tick)

    def __init__(self, gen: Generation, parsed: MessagesRequest, passthrough: frozenset[str]) -> None:
        self.gen = gen
        self.passthrough = passthrough
        self.renderer = MessagesStreamRenderer(
            generation_id=gen.id, public_model=gen.request.model, omit_thinking=parsed.omit_thinking
        )

    def begin(self, committed: Committed) -> bytes:
        if committed.provider in self.passthrough:
            self.renderer.passthrough = True  # the upstream's own message_start comes next
            return b""
        return self.renderer.begin(quick_prompt_estimate(self.gen.request.messages))

    def event(self, event: Event) -> bytes:
        return self.renderer.render(event)

    def keepalive_tick(self) -> bytes:
        return self.renderer.ping()

    def finish(self) -> bytes:
        return self.renderer.finish(self.gen.recorder.final_usage())

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.fail(failure)


def _messages_json(gen: Generation, parsed: MessagesRequest) -> BuiltJson:
    builder = MessageBuilder(generation_id=gen.id, public_model=gen.request.model, omit_thinking=parsed.omit_thinking)
    return BuiltJson(gen, builder)


def _headers(req: Request) -> dict[str, str]:
    return {name: value for name in ANTHROPIC_HEADERS if (value := req.header(name)) is not None}


async def messages(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    parsed = parse_messages_request(body, _headers(req))
    passthrough = speaking(state.config.providers, WireFormat.MESSAGES)
    spec = DoorSpec(
        door=Door.MESSAGES,
        model_type="chat",
        body=body,
        request=parsed.request,
        make_stream=lambda gen: _MessagesStream(gen, parsed, passthrough),
        make_json=lambda gen: _messages_json(gen, parsed),
    )
    await serve_generation(req, state, key, spec)


def _tokens(parsed: MessagesRequest) -> int:
    request = parsed.request
    tools = orjson.dumps(request.tools).decode() if request.tools else ""
    return estimate_prompt_tokens(request.messages) + count_tokens(tools)


async def count_message_tokens(req: Request, state: AppState, key: ApiKey) -> None:
    """The prompt's tokens by the gateway's own tokenizer (o200k): an estimate for every route, as no
    route is asked (docs/agents.md)."""
    body = await req.json(state.config.server.max_body_bytes)
    parsed = parse_messages_request(body, _headers(req), count_only=True)
    model = parsed.request.model
    if model not in state.config.models:
        raise ModelNotFound(f"model {quote(model)} is not in the catalog; GET /v1/models lists the ids")
    state.gateway.admission.check_model(key, model)
    await tokenizer_ready()
    tokens = await asyncio.to_thread(_tokens, parsed)
    await req.respond_json(200, {"input_tokens": tokens}, {"x-tidegate-estimated": "true"})
