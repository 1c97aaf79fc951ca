"""The Gemini API door (Gemini CLI, the google-genai SDKs; docs/agents.md), under `/v1beta/` and `/v1/`:
`models/{model}:generateContent`, `:streamGenerateContent` (`?alt=sse`, else one JSON array),
`:countTokens`, `GET models` and `GET models/{model}`.

`{model}` is a tidegate model id (its `/` URL-encoded or not: the path arrives decoded), or the id
without its `provider/` prefix when that names one model. The body is validated into a
`GenerationRequest` (request.py) and served by server/door.py like every generation door:
idempotency, records, identity headers, keys and budgets, fallback before the first byte. A route of
kind `gemini` gets the body as sent and its chunks go back untouched (render/gemini.py). The key comes
in `x-goog-api-key` or `?key=` (or `Authorization: Bearer`); errors use Google's shape
(`gemini_error`, which the app installs for these paths).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from ....commit import Committed
from ....config.model import Config, ModelConfig
from ....doors import Door
from ....errors import InvalidRequest, ModelNotFound, NotFound, TidegateError, quote
from ....events import Event, Failed
from ....gateway.generation import Generation
from ....gateway.usage import count_tokens, estimate_prompt_tokens, tokenizer_ready
from ....providers.kinds import speaking
from ....records import ApiKey
from ....render.gemini import KEEPALIVE, GeminiResponseBuilder, GeminiStreamRenderer, google_error
from ....request import WireFormat
from ...door import BuiltJson, DoorSpec, serve_generation
from ...http import Request
from ...state import AppState
from .request import parse_gemini_request

GENERATION_METHODS = ["generateContent", "streamGenerateContent", "countTokens"]


def is_gemini_path(path: str) -> bool:
    """The door's paths (`GET /v1/models` only with a Gemini key: see `wants_gemini_shape`)."""
    return path.startswith("/v1beta/") or (path.startswith("/v1/models/") and ":" in path)


def wants_gemini_shape(req: Request) -> bool:
    """Google's error and list shapes: the door's paths, and `/v1/models[/{id}]` asked with a Gemini key
    (`x-goog-api-key` or `?key=`: the google-genai SDK at API version v1)."""
    path = req.path
    if is_gemini_path(path):
        return True
    return path.startswith("/v1/models") and (req.header("x-goog-api-key") is not None or req.query("key") is not None)


def gemini_key(req: Request) -> str | None:
    """The tidegate key of a Gemini request, as an `Authorization` value (None: none sent)."""
    value = req.header("x-goog-api-key") or req.query("key")
    return f"Bearer {value.strip()}" if value else None


def gemini_error(error: TidegateError) -> dict[str, Any]:
    body = error.body()["error"]
    assert isinstance(body, dict)
    return google_error(error.status, str(body["message"]), str(body["code"]), error.retry_after)


def resolve_model(config: Config, ref: str) -> str:
    """A tidegate id as it is, else the one id whose part after `provider/` is `ref` (an unknown id is
    left for the gateway's own 404)."""
    ref = ref.removeprefix("models/")
    if ref in config.models:
        return ref
    found = [m for m in config.models if m.partition("/")[2] == ref]
    if len(found) > 1:
        raise ModelNotFound(f"model {quote(ref)} names {len(found)} models ({', '.join(found)}): send the full id")
    return found[0] if found else ref


class _GeminiStream:
    event: Callable[[Event], bytes]  # the renderer's own method: no wrapper call per event
    one_frame_per_event = True  # GeminiStreamRenderer.render writes at most one frame
    comment_keepalives = False  # both SDKs read a comment line as JSON: keep-alives are blank lines

    def __init__(self, gen: Generation, array: bool, passthrough: frozenset[str]) -> None:
        self.gen = gen
        self.passthrough = passthrough
        self.renderer = GeminiStreamRenderer(generation_id=gen.id, public_model=gen.request.model, array=array)
        self.event = self.renderer.render

    def begin(self, committed: Committed) -> bytes:
        self.renderer.passthrough = committed.provider in self.passthrough  # a Gemini route's own chunks
        return b""

    def keepalive_tick(self) -> bytes:
        return KEEPALIVE

    def finish(self) -> bytes:
        return self.renderer.finish(self.gen.recorder.final_usage())

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.fail(failure)


class _GeminiJson(BuiltJson):
    def __init__(self, gen: Generation, passthrough: frozenset[str]) -> None:
        super().__init__(gen, GeminiResponseBuilder(generation_id=gen.id, public_model=gen.request.model))
        self.passthrough = passthrough

    def reset(self) -> None:  # a route commits: a Gemini one's chunks are merged as they are
        super().reset()
        assert isinstance(self.builder, GeminiResponseBuilder)
        self.builder.passthrough = self.gen.relay.provider in self.passthrough


async def model_action(req: Request, state: AppState, key: ApiKey) -> None:
    """`POST models/{model}:{method}`."""
    method = req.path.rpartition(":")[2]  # each of the door's action routes ends `{model}:{method}`
    if method not in GENERATION_METHODS:
        raise NotFound(f"no method {quote(method)} on models; use one of {', '.join(GENERATION_METHODS)}")
    model = resolve_model(state.config, req.path_params["model"])
    body = await req.json(state.config.server.max_body_bytes)
    if method == "countTokens":
        await _count_tokens(req, state, key, model, body)
        return
    stream = method == "streamGenerateContent"
    alt = req.query("alt") or "json"
    if alt not in ("sse", "json"):
        raise InvalidRequest(f"'alt' must be sse or json, got {quote(alt)}")
    request = parse_gemini_request(body, model, stream)
    passthrough = speaking(state.config.providers, WireFormat.GEMINI)
    spec = DoorSpec(
        door=Door.GEMINI,
        model_type="chat",
        # the model and framing are in the URL: an Idempotency-Key's hash covers them too
        body={"model": model, "method": method, "alt": alt, "body": body},
        request=request,
        make_stream=lambda gen: _GeminiStream(gen, alt != "sse", passthrough),
        make_json=lambda gen: _GeminiJson(gen, passthrough),
        content_type="text/event-stream; charset=utf-8" if alt == "sse" else "application/json; charset=utf-8",
    )
    await serve_generation(req, state, key, spec)


def _tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    return estimate_prompt_tokens(messages) + (count_tokens(orjson.dumps(tools).decode()) if tools else 0)


async def _count_tokens(req: Request, state: AppState, key: ApiKey, model: str, body: Any) -> None:
    """`countTokens`: the prompt's tokens by the gateway's own tokenizer (o200k), an estimate on every
    route, as no route is asked (docs/agents.md). The body is `{contents}` or `{generateContentRequest}`."""
    if isinstance(body, dict) and isinstance(body.get("generateContentRequest"), dict):
        body = {k: v for k, v in body["generateContentRequest"].items() if k != "model"}
    if model not in state.config.models:
        raise ModelNotFound(f"model {quote(model)} is not in the catalog; GET /v1beta/models lists the ids")
    request = parse_gemini_request(body, model, False)
    state.gateway.admission.check_model(key, model)
    await tokenizer_ready()
    tokens = await asyncio.to_thread(_tokens, request.messages, request.tools)
    await req.respond_json(200, {"totalTokens": tokens}, {"x-tidegate-estimated": "true"})


def model_entry(m: ModelConfig) -> dict[str, Any]:
    """A catalog model as the Gemini API's `Model` resource."""
    entry: dict[str, Any] = {
        "name": f"models/{m.id}",
        "baseModelId": m.id,
        "version": "tidegate",
        "displayName": m.id,
        "description": f"tidegate model {m.id}",
        "supportedGenerationMethods": GENERATION_METHODS,
    }
    if m.context_length:
        entry["inputTokenLimit"] = m.context_length
    if m.max_output_tokens:
        entry["outputTokenLimit"] = m.max_output_tokens
    return entry


def _generation_models(config: Config) -> list[ModelConfig]:
    return [m for m in config.models.values() if m.type in ("chat", "router")]


async def list_models(req: Request, state: AppState, key: ApiKey) -> None:
    """`GET models`: the catalog's generation models, one page (`nextPageToken` never set)."""
    await req.respond_json(200, {"models": [model_entry(m) for m in _generation_models(state.config)]})


async def get_model(req: Request, state: AppState, key: ApiKey) -> None:
    model = resolve_model(state.config, req.path_params["model"])
    found = state.config.models.get(model)
    if found is None or found.type not in ("chat", "router"):
        raise ModelNotFound(f"model {quote(model)} is not in the catalog; GET /v1beta/models lists the ids")
    await req.respond_json(200, model_entry(found))
