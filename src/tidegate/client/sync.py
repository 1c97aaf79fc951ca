"""`Client`: the blocking client (httpx). All decisions are in `StreamSession`; this only moves bytes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import httpx

from .base import DEFAULT_TIMEOUT, ClientBase, StreamView, auth_headers, check_json, replay_result
from .errors import IncompleteStream
from .session import REPLAY_PATH, Mode, StreamSession
from .types import Done, StreamEvent


class Stream(StreamView):
    """An iterable of typed events; `with` closes the connection. Headers are known after the first event."""

    def __init__(self, events: Iterator[StreamEvent], session: StreamSession) -> None:
        super().__init__(session)
        self._events = events

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def until_done(self) -> Done:
        """Read to the end; the `Done` result (raises `IncompleteStream` otherwise)."""
        for _ in self:
            pass
        if self.session.done is None:  # pragma: no cover - the generator raises first
            raise IncompleteStream("the stream ended without its terminal event")
        return self.session.done


class Client(ClientBase[Stream]):
    """`Client(base_url=None, api_key=None)`: `$TIDEGATE_URL` and `$TIDEGATE_API_KEY` by default."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        max_resumes: int = 3,
        replay_wait_s: float = 120.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key, max_resumes=max_resumes, replay_wait_s=replay_wait_s)
        self._http = http_client or httpx.Client(base_url=self.base_url, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _stream(self, session: StreamSession) -> Stream:
        return Stream(self._run(session), session)

    def _run(self, session: StreamSession) -> Iterator[StreamEvent]:
        while not session.finished:
            req = session.request()
            try:
                with self._http.stream(req.method, req.path, headers=req.headers, content=req.body) as resp:
                    if session.on_head(resp.status_code, resp.headers) is Mode.BODY:
                        yield from session.on_body(resp.read())
                    else:
                        for chunk in resp.iter_raw():
                            yield from session.on_bytes(chunk)
                            session.raise_failure()
                            if session.finished:
                                break
                        else:
                            session.on_end("the stream ended without its terminal event")
            except httpx.TransportError as exc:
                session.on_end(
                    f"connection lost ({type(exc).__name__})", connect_failed=isinstance(exc, httpx.ConnectError)
                )
            delay = session.take_delay()
            if delay and not session.finished:
                time.sleep(delay)

    # -- one-shot calls
    def replay(self, idempotency_key: str) -> Done:
        """The stored result for a key; never starts a generation. Only a complete result returns."""
        headers = {**auth_headers(self.api_key), "Idempotency-Key": idempotency_key}
        resp = self._http.post(REPLAY_PATH, headers=headers)
        return replay_result(resp.status_code, resp.headers, resp.content, idempotency_key)

    def generation(self, generation_id: str) -> dict[str, Any]:
        resp = self._http.get(f"/api/v1/generations/{generation_id}", headers=self._headers())
        result: dict[str, Any] = check_json(resp.status_code, resp.headers, resp.content)
        return result

    def cancel(self, generation_id: str) -> dict[str, Any]:
        resp = self._http.post(f"/api/v1/generations/{generation_id}/cancel", headers=self._headers())
        result: dict[str, Any] = check_json(resp.status_code, resp.headers, resp.content)
        return result

    def models(self) -> list[dict[str, Any]]:
        resp = self._http.get("/v1/models", headers=self._headers())
        data: list[dict[str, Any]] = check_json(resp.status_code, resp.headers, resp.content).get("data") or []
        return data
