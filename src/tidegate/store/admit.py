"""Admission's arithmetic (docs/api-operations.md §11), shared by the SQL stores and mirrored by Redis's Lua script.

A generation of a key with credits or limits is admitted in one store transaction that sees every
instance's state: the budget period's reset, the credits (spent + the live reservations + this
reservation must fit), the concurrent streams (the live reservations) and the two rate limits.
Nothing changes unless everything admits.

Rate limits are GCRA (the generic cell rate algorithm): per limit one number, the theoretical
arrival time `tat`; a limit of L per 60 s lets a request of cost c in when `max(tat, now) + c * 60/L`
is at most 60 s ahead of now. A burst of the whole limit is admitted at once, then one unit every
60/L seconds: "60 a minute" never admits more than 60 in the first minute, and the `Retry-After` of a
refusal is exact. One number per limit (not a log of requests) keeps the Redis script and the SQL
row small whatever the limit.

Reservations live in their own rows, each naming the gateway process that holds it: one whose lease
expired (docs/api-operations.md §10: it crashed) no longer counts and is deleted by the next admission of its key,
so a crash never leaks credits or a concurrency slot.

Settlement charges what the generation cost, but never past the key's credits (`charge`): a provider
that bills more than the reservation assumed (an answer longer than the assumed output cap, a prompt
the provider counts higher, or a hostile usage report) cannot push a balance below zero, whatever
runs concurrently, because the cap is applied in the same store transaction that adds the cost.
"""

from __future__ import annotations

import calendar
import math
import time
from dataclasses import dataclass, field

WINDOW_S = 60.0  # rpm and tpm are per minute
_EPSILON = 1e-9  # float slack: a burst of exactly the limit fits


@dataclass(frozen=True, slots=True)
class Ask:
    """What one generation asks of its key."""

    key_id: str
    generation_id: str
    owner: str  # the gateway process (lease owner) holding the reservation
    amount: float  # USD reserved (0 for a key without credits)
    tokens: int  # counted against tpm
    period_floor: float  # start of the key's current budget period (0: no period)


@dataclass(slots=True)
class Counters:
    """A key's state in the transaction: what its row holds plus its live reservations."""

    credits: float | None
    spent: float
    period_start: float
    rpm: int | None
    tpm: int | None
    concurrent: int | None
    rpm_tat: float = 0.0
    tpm_tat: float = 0.0
    reserved: float = 0.0  # sum of the live reservations' amounts
    live: int = 0  # number of live reservations


@dataclass(slots=True)
class Decision:
    admitted: bool
    refusal: str | None = None  # "concurrent" | "rpm" | "tpm" | "credits"
    retry_after: float | None = None
    # X-RateLimit-* values, by "requests" / "tokens": (limit, remaining, reset seconds)
    rates: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    balance: float | None = None  # credits - spent - reserved, before this reservation


def period_floor(period: str | None, now: float) -> float:
    """Start (Unix seconds, UTC) of the budget period containing `now`; 0 without a period."""
    if period is None:
        return 0.0
    t = time.gmtime(now)
    if period == "daily":
        return float(calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0)))
    if period == "monthly":
        return float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))
    raise ValueError(f"unknown budget period {period!r}")


def roll_period(c: Counters, floor: float) -> bool:
    """A new budget period starts with nothing spent. Returns whether it rolled."""
    if floor > c.period_start:
        c.spent, c.period_start = 0.0, floor
        return True
    return False


def _gcra(tat: float, now: float, limit: int, cost: int) -> tuple[bool, float, int, float]:
    """(admitted, new tat, remaining after this request, seconds until the window is full again;
    when refused: the seconds to wait instead of the new tat)."""
    interval = WINDOW_S / limit
    new_tat = max(tat, now) + cost * interval
    ahead = new_tat - now
    if ahead > WINDOW_S + _EPSILON:
        wait = ahead - WINDOW_S if cost <= limit else WINDOW_S
        remaining = max(0, math.floor((WINDOW_S - (max(tat, now) - now)) / interval + _EPSILON))
        return False, wait, remaining, max(tat, now) - now
    remaining = max(0, math.floor((WINDOW_S - ahead) / interval + _EPSILON))
    return True, new_tat, remaining, ahead


def decide(c: Counters, ask: Ask, now: float) -> Decision:
    """Admit `ask` against `c` (after `roll_period`), updating `c`'s tats and reservation sums when
    admitted. Limits are checked first (a 429 is worth retrying), credits last."""
    d = Decision(admitted=False)
    if c.credits is not None:
        d.balance = c.credits - c.spent - c.reserved
    if c.concurrent is not None and c.live >= c.concurrent:
        d.refusal, d.retry_after = "concurrent", 1.0
        return d
    new_rpm = new_tpm = 0.0
    if c.rpm is not None:
        ok, value, remaining, reset = _gcra(c.rpm_tat, now, c.rpm, 1)
        d.rates["requests"] = (c.rpm, remaining, reset)
        if not ok:
            d.refusal, d.retry_after = "rpm", value
            return d
        new_rpm = value
    if c.tpm is not None:
        ok, value, remaining, reset = _gcra(c.tpm_tat, now, c.tpm, ask.tokens)
        d.rates["tokens"] = (c.tpm, remaining, reset)
        if not ok:
            d.refusal, d.retry_after = "tpm", value
            return d
        new_tpm = value
    # nothing left refuses even a free request (a key at its budget is at its budget)
    if c.credits is not None and (c.spent >= c.credits or c.spent + c.reserved + ask.amount > c.credits + _EPSILON):
        d.refusal = "credits"
        return d
    d.admitted = True
    if c.rpm is not None:
        c.rpm_tat = new_rpm
    if c.tpm is not None:
        c.tpm_tat = new_tpm
    c.reserved += ask.amount
    c.live += 1
    return d


def charge(spent: float, cost: float, credits: float | None) -> float:
    """The key's `spent` after a generation of `cost` settles: never past its credits (an admin who
    lowered the credits below what is spent does not refund it either)."""
    total = spent + cost
    if credits is None or total <= credits:
        return total
    return max(spent, credits)


def correct_tokens(tpm_tat: float, tpm: int | None, reserved_tokens: int, used_tokens: int) -> float:
    """At settlement the tokens limit counts what was used, not what was reserved."""
    if tpm is None or reserved_tokens == used_tokens:
        return tpm_tat
    return tpm_tat + (used_tokens - reserved_tokens) * (WINDOW_S / tpm)
