"""The error tree and its one mapping to HTTP status + contract error code (docs/api.md §4)."""

from __future__ import annotations

from typing import ClassVar

QUOTE_LIMIT = 200  # characters of what a client sent that an error message may repeat (docs/api-edges.md §16)
MESSAGE_LIMIT = 1000  # characters of any error message


def quote(value: object) -> str:
    """`value` as an error message quotes it: its repr, cut to `QUOTE_LIMIT` characters of the
    client's input (a 1.9 MB model name is not sent back whole)."""
    if isinstance(value, str) and len(value) > QUOTE_LIMIT:
        return f"{value[:QUOTE_LIMIT]!r}… ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= QUOTE_LIMIT else f"{text[:QUOTE_LIMIT]}… ({len(text):,} characters)"


class TidegateError(Exception):
    """Base of every error that becomes a client-visible JSON error."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    type: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, retry_after: float | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self._code = code
        self.headers: dict[str, str] | None = None  # more response headers (a limit's X-RateLimit-*)

    @property
    def error_code(self) -> str:
        return self._code or self.code

    def body(self) -> dict[str, object]:
        message = self.message
        if len(message) > MESSAGE_LIMIT:  # a backstop: every quote of client input goes through `quote`
            message = message[:MESSAGE_LIMIT] + "…"
        return {"error": {"code": self.error_code, "message": message, "type": self.type}}


class InvalidRequest(TidegateError):
    status = 400
    code = "invalid_request"
    type = "invalid_request_error"


class StreamNotSupported(InvalidRequest):
    code = "stream_not_supported"


class UnsupportedParameter(InvalidRequest):
    """A field no route of the model can honour (docs/api-edges.md §15): refused, never silently dropped."""

    code = "unsupported_parameter"


class Unauthorized(TidegateError):
    status = 401
    code = "unauthorized"
    type = "authentication_error"


class InsufficientCredits(TidegateError):
    status = 402
    code = "insufficient_credits"
    type = "billing_error"


class Forbidden(TidegateError):
    status = 403
    code = "forbidden"
    type = "permission_error"


class ModelNotAllowed(Forbidden):
    code = "model_not_allowed"


class NotFound(TidegateError):
    status = 404
    code = "not_found"
    type = "invalid_request_error"


class ModelNotFound(NotFound):
    code = "model_not_found"


class GenerationNotFound(NotFound):
    code = "generation_not_found"


class ResponseNotFound(NotFound):
    code = "response_not_found"


class MethodNotAllowed(TidegateError):
    status = 405
    code = "method_not_allowed"
    type = "invalid_request_error"


class GenerationInProgress(TidegateError):
    status = 409
    code = "generation_in_progress"
    type = "conflict_error"


class PayloadTooLarge(TidegateError):
    status = 413
    code = "payload_too_large"
    type = "invalid_request_error"


class IdempotencyKeyReused(TidegateError):
    status = 422
    code = "idempotency_key_reused"
    type = "invalid_request_error"


class RateLimited(TidegateError):
    status = 429
    code = "rate_limited"
    type = "rate_limit_error"


class UpstreamError(TidegateError):
    status = 502
    code = "upstream_error"
    type = "upstream_error"


class NoProviderAvailable(TidegateError):
    status = 503
    code = "no_provider_available"
    type = "server_error"


class UpstreamTimeout(TidegateError):
    status = 504
    code = "upstream_timeout"
    type = "upstream_error"


class ConfigError(Exception):
    """Invalid configuration; the message names the bad key."""


class ProviderFailure(Exception):
    """An upstream failed before the commit point (raised by provider transports, caught by the router).

    `status` is the upstream HTTP status (0 for connect errors / timeouts). `retriable` says whether the
    next route may be tried (401/403/429/5xx, connect errors, timeouts, early in-band errors).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int = 0,
        retriable: bool = True,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retriable = retriable
        self.retry_after = retry_after


def retriable_status(status: int) -> bool:
    """Upstream statuses that move to the next route (docs/api.md §4)."""
    return status in (401, 403, 408, 429) or status >= 500
