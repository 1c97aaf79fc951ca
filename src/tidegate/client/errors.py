"""The client's exception tree.

`TidegateAPIError` (and a subclass per status): the gateway refused the request before any stream
started (a JSON error with a real status). `IncompleteStream`: a stream that began but did not end
with its terminal event; `StreamFailed` (the gateway announced a failure in-band) and
`StreamProtocolError` (undecodable data) are its subclasses. Partial output is on the exception,
never presented as a result.
"""

from __future__ import annotations

from typing import Any


class TidegateClientError(Exception):
    """Base of every error raised by `tidegate.client`."""


class TidegateConnectionError(TidegateClientError):
    """The gateway could not be reached at all (nothing was sent)."""


class TidegateAPIError(TidegateClientError):
    """A JSON error answer: `{"error": {"code", "message"}}` with a non-2xx status."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int,
        generation_id: str | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message} (HTTP {status}, generation {generation_id or 'unknown'})")
        self.code = code
        self.message = message
        self.status = status
        self.generation_id = generation_id
        self.retry_after = retry_after
        self.body = body or {}


class BadRequestError(TidegateAPIError):
    """400"""


class AuthenticationError(TidegateAPIError):
    """401"""


class InsufficientCreditsError(TidegateAPIError):
    """402"""


class NotFoundError(TidegateAPIError):
    """404 (model_not_found, generation_not_found)"""


class ConflictError(TidegateAPIError):
    """409 generation_in_progress"""


class PayloadTooLargeError(TidegateAPIError):
    """413"""


class IdempotencyKeyReusedError(TidegateAPIError):
    """422: the same Idempotency-Key was sent with a different body"""


class RateLimitError(TidegateAPIError):
    """429 (see `retry_after`)"""


class UpstreamError(TidegateAPIError):
    """502: every route failed (or a replayed generation had failed)"""


class ServiceUnavailableError(TidegateAPIError):
    """503"""


class UpstreamTimeoutError(TidegateAPIError):
    """504"""


_BY_STATUS: dict[int, type[TidegateAPIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    402: InsufficientCreditsError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: IdempotencyKeyReusedError,
    429: RateLimitError,
    502: UpstreamError,
    503: ServiceUnavailableError,
    504: UpstreamTimeoutError,
}


def api_error(
    status: int,
    body: Any,
    *,
    generation_id: str | None,
    retry_after: float | None = None,
    fallback_text: str = "",
) -> TidegateAPIError:
    """Build the typed error for a non-2xx answer (`body` is the parsed JSON, or None)."""
    code = f"http_{status}"
    message = fallback_text[:200] or "no error body"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code") or err.get("type") or code)
        message = str(err.get("message") or message)
    cls = _BY_STATUS.get(status, TidegateAPIError)
    return cls(
        code,
        message,
        status=status,
        generation_id=generation_id,
        retry_after=retry_after,
        body=body if isinstance(body, dict) else None,
    )


class IncompleteStream(TidegateClientError):
    """The stream ended without its terminal event: the answer is incomplete.

    `partial_text` is what arrived (never a result); `generation_id` and `idempotency_key` are the
    handles to recover it later (`tidegate replay KEY`).
    """

    def __init__(
        self,
        message: str,
        *,
        partial_text: str = "",
        generation_id: str | None = None,
        idempotency_key: str | None = None,
        code: str = "incomplete",
    ) -> None:
        super().__init__(f"incomplete stream: {message} (generation {generation_id or 'unknown'})")
        self.reason = message
        self.partial_text = partial_text
        self.generation_id = generation_id
        self.idempotency_key = idempotency_key
        self.code = code


class StreamFailed(IncompleteStream):
    """The gateway announced a failure inside the stream (error chunk, `finish_reason: "error"`,
    `response.failed`, native `error`, or a replay answering 502)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        provider: str | None = None,
        partial_text: str = "",
        generation_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(
            f"{code}: {message}",
            partial_text=partial_text,
            generation_id=generation_id,
            idempotency_key=idempotency_key,
            code=code,
        )
        self.message = message
        self.provider = provider


class StreamProtocolError(IncompleteStream):
    """The stream carried data the client cannot decode (invalid JSON, an oversize line)."""
