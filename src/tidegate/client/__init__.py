"""tidegate.client: a small typed client that gets streaming right.

It checks the status before reading, records the generation headers, decodes SSE incrementally,
surfaces keep-alives, stops only on the terminal event (anything else raises `IncompleteStream`),
raises on in-band failures, reads usage, keeps reasoning apart from the answer, accumulates tool
calls by index, detects buffered JSON answers, and recovers dropped streams by resume or replay.
Depends on `tidegate.sse` only, never on the server.
"""

from .aio import AsyncClient, AsyncStream
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    IdempotencyKeyReusedError,
    IncompleteStream,
    InsufficientCreditsError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitError,
    ServiceUnavailableError,
    StreamFailed,
    StreamProtocolError,
    TidegateAPIError,
    TidegateClientError,
    TidegateConnectionError,
    UpstreamError,
    UpstreamTimeoutError,
)
from .sync import Client, Stream
from .types import (
    Done,
    KeepAlive,
    ReasoningDelta,
    Started,
    Status,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)

__all__ = [
    "AsyncClient",
    "AsyncStream",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "Done",
    "IdempotencyKeyReusedError",
    "IncompleteStream",
    "InsufficientCreditsError",
    "KeepAlive",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitError",
    "ReasoningDelta",
    "ServiceUnavailableError",
    "Started",
    "Status",
    "Stream",
    "StreamEvent",
    "StreamFailed",
    "StreamProtocolError",
    "TextDelta",
    "TidegateAPIError",
    "TidegateClientError",
    "TidegateConnectionError",
    "ToolCall",
    "ToolCallDelta",
    "UpstreamError",
    "UpstreamTimeoutError",
    "Usage",
]
