"""The fallback policy (docs/api.md §4): what a route's failure means, for every door.

One table, used by the streaming relay (chat, Responses, native, images) and the embedding relay
alike, and shown in docs/fallback.md (a test checks the two agree):

| the failure                                                         | before the response starts | after |
|---------------------------------------------------------------------|----------------------------|-------|
| retriable: 401, 403, 429, 5xx, connect error (an address refused too), timeout, in-band error | next route | end |
| `unsupported_parameter`: this route cannot serve the request as asked | next route                 | end   |
| `invalid_request`: the upstream judged the request itself invalid   | answer now (400)           | end   |
| any other non-retriable failure                                     | answer now (502)           | end   |

"End" is the door's failure ending (the failure chunk, the `error` event). When every route failed
before the response started, `final_error` gives the one answer: the first route's refusal when a
route could not serve the request as asked (its 400 names why), else 504, 429, 503 or 502 by what
the failures were.
"""

from __future__ import annotations

from ..commit import RouteFailure
from ..errors import (
    InvalidRequest,
    NoProviderAvailable,
    RateLimited,
    TidegateError,
    UnsupportedParameter,
    UpstreamError,
    UpstreamTimeout,
)

NEXT_ROUTE, ANSWER_NOW, END_STREAM = "next route", "answer now", "end"


def after_failure(code: str, retriable: bool, committed: bool) -> str:
    """NEXT_ROUTE, ANSWER_NOW or END_STREAM for a failure of `code` (the table above)."""
    if committed:
        return END_STREAM
    if retriable or code == "unsupported_parameter":
        return NEXT_ROUTE
    return ANSWER_NOW


def answer_now(failure: RouteFailure) -> TidegateError:
    """The answer to a failure that ends the request before its response starts."""
    if failure.code == "invalid_request" or failure.status == 400:
        return InvalidRequest(failure.message)
    if failure.provider in failure.message:  # the providers' own messages name them already
        return UpstreamError(failure.message)
    return UpstreamError(f"{failure.provider}: {failure.message}")


def final_error(failures: list[RouteFailure]) -> TidegateError:
    """The docs/api.md §4 error once every route failed before the response started."""
    if not failures:
        return NoProviderAvailable("no route is configured for this model")
    refused = [f for f in failures if f.code == "unsupported_parameter"]
    if refused:
        return UnsupportedParameter(refused[0].message)
    tried = ", ".join(f"{f.provider} ({f.code}{' ' + str(f.status) if f.status else ''})" for f in failures)
    if all(f.code == "upstream_timeout" for f in failures):
        return UpstreamTimeout(f"every route timed out: {tried}")
    if all(f.status == 429 for f in failures):
        waits = [f.retry_after for f in failures if f.retry_after is not None]
        return RateLimited(
            f"every route is rate limited: {tried}; retry later",
            retry_after=min(waits) if waits else 1.0,
        )
    if all(f.code in ("connect_error", "address_refused") for f in failures):
        return NoProviderAvailable(f"no provider could be reached: {tried}")
    # a refused credential or a wrong path is the operator's to fix: its message says what to check
    setup = list(dict.fromkeys(f.message for f in failures if f.status in (401, 403, 404)))
    if len(failures) == 1 and setup:  # its message names the provider and the status: once is enough
        return UpstreamError(f"every route failed: {setup[0]}")
    return UpstreamError(f"every route failed: {tried}" + "".join(f"; {m}" for m in setup))
