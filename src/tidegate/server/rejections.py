"""Requests refused before a generation began (a missing key, an unknown model, a body that does not
validate, a limit, a body too large) made visible (docs/observability.md#rejected-requests).

Each one becomes a record with status `rejected` (its HTTP status, error code, the model asked for,
the path, and the key when one authenticated; never the secret presented), written before the error
is answered so that its `X-Generation-Id` resolves at once, and counts in the console's rollups as an
error whose provider group is `rejected:<code>`. Only refusals pay for this: a request that goes on
to a generation touches nothing here.

A refusal without an authenticated key costs an attacker nothing, so its records are bounded: at
most `UNAUTHENTICATED_BURST` at once and `UNAUTHENTICATED_PER_S` a second after that, per gateway
process (a token bucket). Past the bound it is still counted in the rollups, which are summed in
memory and written once a second (no store round trip of its own), and still in the access log and
in `tidegate_rejected_total`; only its individual record is skipped.
"""

from __future__ import annotations

import logging
import time

from .. import metrics
from ..config.model import Config
from ..errors import MESSAGE_LIMIT, NotFound, TidegateError
from ..records import ApiKey, GenerationRecord
from ..store.base import GenerationStore
from ..store.console import ConsoleStore, Rollup
from .http import ASKED_MODEL, Request

log = logging.getLogger("tidegate.server")

UNAUTHENTICATED_BURST = 60
UNAUTHENTICATED_PER_S = 1.0
MODEL_LIMIT = 128  # characters of the asked model kept in the record's error
# ASGI scope entries the app leaves: the authenticated key, and "no endpoint has this path"
KEY = "tidegate.key"
UNROUTED = "tidegate.unrouted"
REJECTED_GROUP = "rejected:"  # the rollups' provider group of a refusal: `rejected:<error code>`


class TokenBucket:
    """`burst` tokens, refilled at `per_s`: whether one more unauthenticated record may be written."""

    def __init__(self, burst: int, per_s: float) -> None:
        self.burst, self.per_s = burst, per_s
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def recorded(req: Request, error: TidegateError, generates: bool) -> bool:
    """Whether a refusal is one the operator must see: on an endpoint that starts generations, a
    refused credential anywhere on the API, or a path no endpoint has. (A lookup that finds nothing,
    such as a generation id the admin API does not know, is an answer, not a refusal.)"""
    if req.generation_id is None:
        return False
    return generates or error.status in (401, 403) or (isinstance(error, NotFound) and UNROUTED in req.scope)


class Rejections:
    def __init__(self, config: Config, store: GenerationStore, console: ConsoleStore) -> None:
        self.config = config
        self.store = store
        self.console = console
        self.unauthenticated = TokenBucket(UNAUTHENTICATED_BURST, UNAUTHENTICATED_PER_S)

    def record_of(self, req: Request, error: TidegateError, door: str) -> GenerationRecord:
        key = req.scope.get(KEY)
        asked = req.scope.get(ASKED_MODEL)
        if asked is None:
            asked = req.path_params.get("model")  # the Gemini door names it in the path
        asked = asked[:MODEL_LIMIT] if isinstance(asked, str) else None
        assert req.generation_id is not None
        return GenerationRecord(
            id=req.generation_id,
            key_id=key.id if isinstance(key, ApiKey) else "",
            # a catalog model only: a name a client made up would be a rollup group of its own
            model=asked if asked is not None and asked in self.config.models else "",
            door=door,
            created_at=time.time(),
            status="rejected",
            error={
                "code": error.error_code,
                "message": error.message[:MESSAGE_LIMIT],
                "status": error.status,
                "model": asked,
                "path": door,
            },
        )

    async def refused(self, req: Request, error: TidegateError, door: str) -> GenerationRecord:
        """Count the refusal, and write its record unless it is past the unauthenticated bound."""
        record = self.record_of(req, error, door)
        metrics.REJECTED.labels(error.error_code).inc()
        group = REJECTED_GROUP + error.error_code
        self.console.count(Rollup(record.created_at, record.model, group, record.key_id, True, 0, 0, 0.0, -1))
        if record.key_id or self.unauthenticated.take(time.monotonic()):
            try:
                await self.store.create_generation(record)
            except Exception:  # the store being down must not turn a 401 into a 500
                log.warning("the record of a rejected request could not be written", exc_info=True)
        return record
