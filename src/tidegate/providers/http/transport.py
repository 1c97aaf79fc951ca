"""HTTP transport shared by the HTTP upstream kinds (openai, anthropic, bedrock, vertex).

An `HttpAdapter` is pure: `build_request` → `UpstreamHttpRequest`, `new_decoder()` → a stateful
`StreamDecoder` (bytes in, canonical events out) and `map_error(status, headers, body)` →
`ProviderFailure`. This module does the I/O with `http_client.HttpClient` (one per provider): the
bytes of each upstream read go to the decoder as they arrived; it never sleeps or times out (the relay
does; the client bounds only the connect).
"""

from __future__ import annotations

import email.utils
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...config.model import ProviderConfig
from ...errors import ProviderFailure, retriable_status
from ...events import Event, Failed
from ...request import GenerationRequest, WireFormat
from ...sse import SSEProtocolError
from ..hints import what_to_check
from .client import AddressRefused, ConnectFailed, HttpClient, HttpResponse, UpstreamHttpError
from .upstream import Upstream

_log = logging.getLogger("tidegate.upstream")

MAX_ERROR_BODY = 64 * 1024


def undecodable(exc: Exception) -> str:
    """The failure message for upstream data that does not decode (an over-cap SSE line, bad JSON)."""
    if isinstance(exc, SSEProtocolError):
        return str(exc)
    return f"undecodable upstream data: {exc}"[:300]


@dataclass(slots=True)
class UpstreamHttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    # Set by adapters whose signing needs the final bytes (Bedrock SigV4); called right before sending.
    sign: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class StreamDecoder(Protocol):
    def feed(self, chunk: bytes) -> list[Event]:
        """Decode bytes; raise `SSEProtocolError` / `ValueError` on undecodable data."""
        ...

    def end(self) -> list[Event]:
        """EOF: return `[Failed(...)]` when the stream ended without its terminal event, else []."""
        ...


class HttpAdapter(Protocol):
    name: str

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest: ...

    def new_decoder(self, request: GenerationRequest, served_model: str) -> StreamDecoder: ...

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure: ...


# Things that look like credentials: provider key prefixes, bearer tokens, long opaque tokens.
_SECRETISH = re.compile(
    r"(?i)\bbearer\s+\S+|\b(?:sk|pk|rk|key|tok|api)[-_][A-Za-z0-9_\-\.]{6,}|\b(?=[A-Za-z0-9_\-]*\d)"
    r"(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}\b"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
MAX_UPSTREAM_TEXT = 300


def sanitize(text: Any, secret: str | None = None, limit: int = MAX_UPSTREAM_TEXT) -> str:
    """Upstream text made safe to show a client: a string, no key, no control characters, capped."""
    s = text if isinstance(text, str) else ""
    s = _SECRETISH.sub("***", s)
    if secret:
        s = s.replace(secret, "***")
    s = _CONTROL.sub(" ", s).strip()
    return s if len(s) <= limit else s[: limit - 3] + "..."


def retry_after_seconds(headers: dict[str, str]) -> float | None:
    """`Retry-After` (seconds or an HTTP date) or `retry-after-ms`, in seconds; headers lower-cased."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def send_request(client: HttpClient, req: UpstreamHttpRequest) -> HttpResponse:
    """Send and wait for the response head. Anything that fails before the upstream answered is a
    retriable `ProviderFailure` (the route's fallback). The client keeps no cookies: a cookie an
    upstream sets while answering one tenant never rides on another tenant's request."""
    if req.sign is not None:
        req.sign(req)
    try:
        return await client.request(req.method, req.url, req.headers, req.body)
    except (OSError, UpstreamHttpError, ValueError) as exc:
        raise transport_failure(client.name, exc) from None


def transport_failure(provider: str, exc: Exception) -> ProviderFailure:
    """The one mapping of what can go wrong before an upstream answers to a retriable failure that
    names the provider: `connect_error` for refused, unresolvable, TLS (verification, handshake,
    client certificate), proxy (unreachable, CONNECT refused with its status), the connect timeout
    and `max_connections` exhausted; `upstream_error` for an answer that is not HTTP or a request
    the provider's config makes unsendable; `address_refused` for a name that resolved to an
    address the address rule refuses (addresses.py: nothing was connected to; the operator is warned).
    The messages carry host names, ports and statuses, never a URL's user info or a header."""
    if isinstance(exc, AddressRefused):
        _log.warning("provider %s: %s", provider, exc)
        return ProviderFailure("address_refused", f"could not reach provider {provider}: {exc}", retriable=True)
    if isinstance(exc, ConnectFailed):
        return ProviderFailure("connect_error", f"could not reach provider {provider}: {exc}", retriable=True)
    if isinstance(exc, UpstreamHttpError):
        return ProviderFailure("upstream_error", f"provider {provider}: {exc}", retriable=True)
    if isinstance(exc, OSError):
        detail = exc.strerror.lower() if exc.strerror else type(exc).__name__
        return ProviderFailure("connect_error", f"could not reach provider {provider} ({detail})", retriable=True)
    return ProviderFailure(  # ValueError: a URL or header this client cannot send
        "upstream_error", f"the request to provider {provider} cannot be sent: {exc}", retriable=True
    )


def with_hint(failure: ProviderFailure, config: ProviderConfig | None) -> ProviderFailure:
    """The failure with what its upstream status says the operator should check appended."""
    hint = what_to_check(failure.status, config) if config is not None else ""
    if not hint:
        return failure
    return ProviderFailure(
        failure.code,
        f"{failure.message}; {hint}",
        status=failure.status,
        retriable=failure.retriable,
        retry_after=failure.retry_after,
    )


def default_failure(status: int, headers: dict[str, str], message: str) -> ProviderFailure:
    return ProviderFailure(
        "upstream_error",
        message,
        status=status,
        retriable=retriable_status(status),
        retry_after=retry_after_seconds(headers),
    )


class HttpStream:
    """A response being read: chunk → decoder → events. Failures become one `Failed` event; its
    consumer (the relay) stops reading and closes the stream at the first `Failed` of a batch.

    `attach(deliver)` is the direct delivery (`base.DirectStream`): each read's batch goes to
    `deliver` inside the connection's protocol callback, with no task woken; a batch `deliver`
    does not take is kept for the next `read()`, which the connection's nudge wakes."""

    __slots__ = ("_decoder", "_deliver", "_ended", "_kept", "_kept_error", "_provider", "_response")

    def __init__(self, response: HttpResponse, decoder: StreamDecoder, provider: str) -> None:
        self._response = response
        self._decoder = decoder
        self._provider = provider
        self._ended = False
        self._deliver: Callable[[list[Event]], bool] | None = None
        self._kept: list[Event] | None = None  # a batch handed back by the direct delivery
        self._kept_error: BaseException | None = None  # what the direct delivery raised

    async def read(self) -> list[Event] | None:
        if self._ended and self._kept is None and self._kept_error is None:
            return None
        try:
            chunk = await self._response.next_chunk()
        except (OSError, UpstreamHttpError) as exc:
            self._ended = True
            return [Failed("upstream_error", f"the upstream connection broke: {exc}", self._provider)]
        if chunk is None:  # nudged: the direct delivery handed a batch (or its failure) back, and
            # it comes before any bytes that arrived since (the nudge is looked at first)
            return self._take_kept()
        if chunk:
            return self._decode(chunk)
        self._ended = True
        try:
            events: list[Event] = self._decoder.end()
        except (SSEProtocolError, ValueError) as exc:
            return [self._undecodable(exc)]
        return events or None

    def _decode(self, chunk: bytes) -> list[Event]:
        try:
            events: list[Event] = self._decoder.feed(chunk)
        except (SSEProtocolError, ValueError) as exc:
            self._ended = True
            return [self._undecodable(exc)]
        return events  # a `Failed` among them ends the route: the relay closes this stream (no scan here)

    def _undecodable(self, exc: Exception) -> Failed:
        return Failed("upstream_protocol_error", undecodable(exc), self._provider)

    def _take_kept(self) -> list[Event] | None:
        error, self._kept_error = self._kept_error, None
        if error is not None:
            raise error
        kept, self._kept = self._kept, None
        return kept if kept is not None else []

    def attach(self, deliver: Callable[[list[Event]], bool]) -> bool:
        """Hand each read's batch to `deliver` as it arrives; False when the stream cannot now
        (bytes or a batch wait to be read, the body ended): read on and try again later."""
        if self._ended or self._kept is not None or self._kept_error is not None:
            return False
        if not self._response.attach_sink(self._sink):
            return False
        self._deliver = deliver
        return True

    def detach(self) -> None:
        self._deliver = None
        self._response.detach_sink()

    def _sink(self, chunk: bytes) -> None:
        """The connection's sink: runs in its protocol callback, so it never raises."""
        deliver = self._deliver
        batch = self._decode(chunk)
        try:
            if deliver is not None and deliver(batch):
                return
            self._kept = batch
        except BaseException as exc:  # the consumer's failure, raised to it in its own task
            self._kept_error = exc
        self.detach()
        self._response.nudge()

    async def aclose(self) -> None:
        self._ended = True
        self.detach()
        self._response.close()


def http_client_for(name: str, connect_timeout_s: float, config: ProviderConfig | None) -> HttpClient:
    """The client every HTTP provider kind (chat, embeddings, images) connects with."""
    if config is None:
        return HttpClient(connect_timeout_s, Upstream(name=name, connect_timeout_s=connect_timeout_s))
    return HttpClient(connect_timeout_s, Upstream.for_provider(config, connect_timeout_s))


class HttpProvider:
    """A `ChatProvider` for an HTTP upstream, given its pure adapter."""

    def __init__(
        self,
        name: str,
        kind: str,
        adapter: HttpAdapter,
        connect_timeout_s: float = 10.0,
        config: ProviderConfig | None = None,
    ) -> None:
        """`config`: the provider's connection options (proxy, TLS, pool); without it, the defaults."""
        self.name = name
        self.kind = kind
        self.speaks: frozenset[WireFormat] = frozenset()  # providers/kinds.py sets what its kind speaks
        self.adapter = adapter
        self.config = config
        self.client = http_client_for(name, connect_timeout_s, config)

    async def send(self, req: UpstreamHttpRequest) -> HttpResponse:
        """Send; a non-2xx answer raises the adapter's `ProviderFailure` (body read and capped)."""
        response = await send_request(self.client, req)
        if response.status >= 300:
            try:
                body = await response.read(MAX_ERROR_BODY)
            except (OSError, UpstreamHttpError):
                body = b""
            finally:
                response.close()
            raise with_hint(self.adapter.map_error(response.status, response.headers, body), self.config)
        return response

    async def open_chat(self, request: GenerationRequest, served_model: str) -> HttpStream:
        req = await self.adapter.build_request(request, served_model)
        response = await self.send(req)
        response.drop_headers()
        return HttpStream(response, self.adapter.new_decoder(request, served_model), self.name)

    async def aclose(self) -> None:
        await self.client.aclose()
