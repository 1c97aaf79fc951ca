"""A Redis record's console rollups as it ends (docs/console-api.md; the layout in redis_console.py).
Apart from redis_console.py, which reads them, so that the store imports only what it writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..records import GenerationRecord
from .console import RESOLUTIONS, Rollup

_SEP = "\x1f"
_SUM = "\x1e"


async def roll_up(redis: Any, name: Callable[..., str], record: GenerationRecord) -> None:
    """One round trip per ended record (a pipeline, not a transaction: each sum is its own HINCRBY)."""
    r = Rollup.of(record)
    group = _SEP.join((r.model, r.provider, r.key_id)) + _SUM
    pipe = redis.pipeline(transaction=False)
    for res, keep in RESOLUTIONS.items():
        key = name("roll", str(res), str(int(r.created_at // res) * res))
        pipe.hincrby(key, group + "r", 1)
        if r.error:
            pipe.hincrby(key, group + "e", 1)
        if r.input_tokens:
            pipe.hincrby(key, group + "i", r.input_tokens)
        if r.output_tokens:
            pipe.hincrby(key, group + "o", r.output_tokens)
        if r.cost:
            pipe.hincrbyfloat(key, group + "c", r.cost)
        if r.ttft_bucket >= 0:
            pipe.hincrby(key, group + f"h{r.ttft_bucket}", 1)
        pipe.expire(key, keep)
    pipe.zadd(name("console", "gens"), {record.id: record.created_at})
    await pipe.execute()
