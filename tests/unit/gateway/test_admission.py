"""`Admission` (gateway/admission.py) on a real SQLite store with an injected clock: the reservation's
size, the budget period's reset at the UTC boundary (not slept), the refusals' messages and headers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tidegate.config.model import ModelConfig, Pricing, Route
from tidegate.errors import InsufficientCredits, ModelNotAllowed, RateLimited
from tidegate.gateway.admission import DEFAULT_OUTPUT_CAP, Admission, output_cap, rate_headers
from tidegate.gateway.usage import estimate_prompt_tokens
from tidegate.records import ApiKey, KeyLimits
from tidegate.request import GenerationRequest
from tidegate.store.admit import Decision
from tidegate.store.base import GenerationStore
from tidegate.store.sqlite import SQLiteStore

OWNER = "host/1/test"
LAST_SECOND = 1_767_225_599.0  # 2025-12-31T23:59:59Z
MIDNIGHT = 1_767_225_600.0  # 2026-01-01T00:00:00Z
# $1 per million prompt tokens, $1000 per million completion tokens; a route dearer on prompts
MODEL = ModelConfig(
    id="chat",
    type="chat",
    routes=(Route("a", "m"), Route("b", "m", pricing=Pricing(prompt=2.0, completion=500.0))),
    pricing=Pricing(prompt=1.0, completion=1000.0),
    max_output_tokens=200,
)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store() -> AsyncIterator[GenerationStore]:
    s = SQLiteStore("sqlite:///:memory:")
    await s.open()
    await s.renew_lease(OWNER, 3600)
    yield s
    await s.close()


def _request(max_tokens: int | None = 100) -> GenerationRequest:
    return GenerationRequest(model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=max_tokens)


async def _key(store: GenerationStore, **fields: object) -> ApiKey:
    key = ApiKey(id="key_t", name="t", secret_hash="t" * 64, created_at=0.0, **fields)  # type: ignore[arg-type]
    await store.create_key(key)
    return key


async def test_the_reservation_is_the_worst_case_and_the_period_resets_at_midnight(store: GenerationStore) -> None:
    key = await _key(store, credits=0.25, budget_period="daily")
    clock = Clock(LAST_SECOND)
    admission = Admission(store, OWNER, clock)
    ticket = await admission.admit(key, MODEL, "chat", "g1", _request())
    assert ticket is not None and ticket.reserved
    held = await store.get_key(key.id)
    assert held is not None
    # the dearest of the routes' prices: the prompt's tokens x $2/M + 100 tokens x $1000/M
    prompt = estimate_prompt_tokens(_request().messages)
    assert prompt > 0 and held.reserved == pytest.approx(prompt * 2.0 / 1e6 + 100 * 1000.0 / 1e6)
    await ticket.settle(0.2, 50)
    with pytest.raises(InsufficientCredits) as refused:
        await admission.admit(key, MODEL, "chat", "g2", _request())
    assert "may cost up to $0.1000" in refused.value.message and "has $0.050000 left" in refused.value.message

    clock.now = MIDNIGHT  # a new UTC day: nothing spent yet
    ticket = await admission.admit(key, MODEL, "chat", "g2", _request())
    assert ticket is not None
    fresh = await store.get_key(key.id)
    assert fresh is not None and fresh.spent == 0.0 and fresh.period_start == MIDNIGHT


async def test_models_master_and_keys_without_limits(store: GenerationStore) -> None:
    admission = Admission(store, OWNER)
    master = ApiKey(id="master", name="master", secret_hash="", created_at=0.0, is_master=True)
    assert await admission.admit(master, MODEL, "chat", "g0", _request()) is None
    narrow = await _key(store, models=("other",))
    with pytest.raises(ModelNotAllowed):
        await admission.admit(narrow, MODEL, "chat", "g1", _request())
    narrow.models = None
    free = await admission.admit(narrow, MODEL, "chat", "g1", _request())
    assert free is not None and not free.reserved and free.headers is None  # no store round trip
    assert output_cap(_request(None), MODEL) == 200
    bare = ModelConfig(id="x", type="chat", routes=())
    assert output_cap(_request(None), bare) == DEFAULT_OUTPUT_CAP


async def test_rate_limited_carries_headers_and_retry_after(store: GenerationStore) -> None:
    key = await _key(store, limits=KeyLimits(rpm=2, tpm=10_000))
    admission = Admission(store, OWNER)
    for gid in ("a", "b"):
        ticket = await admission.admit(key, MODEL, "chat", gid, _request())
        assert ticket is not None and ticket.headers is not None
    assert ticket.headers["x-ratelimit-remaining-requests"] == "0"
    assert ticket.headers["x-ratelimit-limit-tokens"] == "10000"
    with pytest.raises(RateLimited) as limited:
        await admission.admit(key, MODEL, "chat", "c", _request())
    assert limited.value.retry_after is not None and 29 < limited.value.retry_after <= 30
    assert limited.value.headers is not None and limited.value.headers["x-ratelimit-limit-requests"] == "2"


def test_rate_headers_format() -> None:
    d = Decision(admitted=True, rates={"requests": (60, 59, 1.0), "tokens": (1000, 0, 59.25)})
    assert rate_headers(d) == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "59.25",
    }
    assert rate_headers(Decision(admitted=True)) is None
