"""What both clients share: where the gateway is, the key, request bodies, and one-shot JSON calls."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import httpx

from .errors import StreamFailed, TidegateClientError, api_error
from .results import StreamMeta, done_from_native
from .session import StreamSession, json_or_none, retry_after
from .types import Done

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=300.0)


def resolve_base_url(base_url: str | None) -> str:
    """`$TIDEGATE_URL` by default; with or without a trailing `/v1`."""
    base = (base_url or os.environ.get("TIDEGATE_URL") or DEFAULT_BASE_URL).rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def resolve_api_key(api_key: str | None) -> str | None:
    return api_key or os.environ.get("TIDEGATE_API_KEY") or None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


S = TypeVar("S")  # the stream a client hands out: `Stream` or `AsyncStream`


class StreamView:
    """What a stream says about itself, blocking or async alike: read from its session."""

    def __init__(self, session: StreamSession) -> None:
        self.session = session

    @property
    def generation_id(self) -> str | None:
        return self.session.meta.generation_id

    @property
    def provider(self) -> str | None:
        return self.session.meta.provider

    @property
    def served_model(self) -> str | None:
        return self.session.meta.served_model

    @property
    def idempotency_key(self) -> str | None:
        return self.session.meta.idempotency_key

    @property
    def partial_text(self) -> str:
        return self.session.reader.text

    @property
    def done(self) -> Done | None:
        return self.session.done


class ClientBase(Generic[S]):
    """Where the gateway is, the key, and the three stream calls; subclasses say how a stream runs."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        max_resumes: int = 3,
        replay_wait_s: float = 120.0,
    ) -> None:
        self.base_url = resolve_base_url(base_url)
        self.api_key = resolve_api_key(api_key)
        self.max_resumes = max_resumes
        self.replay_wait_s = replay_wait_s

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        return auth_headers(self.api_key)

    def _session(
        self, door: str, body: dict[str, Any], idempotency_key: str | None, recover: bool = True
    ) -> StreamSession:
        body = {**body, "stream": True}
        return StreamSession(
            door,
            body,
            self._headers(),
            idempotency_key or new_idempotency_key(),
            max_resumes=self.max_resumes if recover else -1,
            replay_wait_s=self.replay_wait_s,
        )

    @staticmethod
    def _params(params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if v is not None}

    def chat_stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        idempotency_key: str | None = None,
        recover: bool = True,
        **params: Any,
    ) -> S:
        body = {"model": model, "messages": messages, **self._params(params)}
        return self._stream(self._session("chat", body, idempotency_key, recover))

    def responses_stream(
        self,
        *,
        model: str,
        input: str | list[dict[str, Any]],
        idempotency_key: str | None = None,
        recover: bool = True,
        **params: Any,
    ) -> S:
        return self._input_stream("responses", model, input, idempotency_key, recover, params)

    def native_stream(
        self,
        *,
        model: str,
        input: str | list[dict[str, Any]],
        idempotency_key: str | None = None,
        recover: bool = True,
        **params: Any,
    ) -> S:
        return self._input_stream("native", model, input, idempotency_key, recover, params)

    def _input_stream(
        self, door: str, model: str, input: Any, idempotency_key: str | None, recover: bool, params: dict[str, Any]
    ) -> S:
        body = {"model": model, "input": input, **self._params(params)}
        return self._stream(self._session(door, body, idempotency_key, recover))

    def _stream(self, session: StreamSession) -> S:
        raise NotImplementedError


def check_json(status: int, headers: Mapping[str, str], content: bytes) -> Any:
    """The parsed body of a 2xx JSON answer, else the typed API error."""
    parsed = json_or_none(content)
    if not 200 <= status < 300:
        raise api_error(
            status,
            parsed,
            generation_id=headers.get("x-generation-id"),
            retry_after=retry_after(headers),
            fallback_text=content.decode("utf-8", "replace"),
        )
    if parsed is None:
        raise TidegateClientError(f"HTTP {status}: the answer is not JSON")
    return parsed


def replay_result(status: int, headers: Mapping[str, str], content: bytes, idempotency_key: str) -> Done:
    """`POST /api/v1/llm/responses/replay`: only a 200 is a result; 502 is a failed generation."""
    parsed = json_or_none(content)
    if status == 502 and isinstance(parsed, dict) and "partial_output" in parsed:
        nested = parsed.get("error")
        err: dict[str, Any] = nested if isinstance(nested, dict) else {}
        partial = parsed.get("partial_output")
        raise StreamFailed(
            str(err.get("code") or parsed.get("status") or "upstream_error"),
            str(err.get("message") or "the generation did not complete"),
            partial_text=partial if isinstance(partial, str) else "",
            generation_id=headers.get("x-generation-id"),
            idempotency_key=idempotency_key,
        )
    result = check_json(status, headers, content)
    meta = StreamMeta(generation_id=headers.get("x-generation-id"), idempotency_key=idempotency_key)
    meta.recovered = "replay"
    return done_from_native(result, meta)
