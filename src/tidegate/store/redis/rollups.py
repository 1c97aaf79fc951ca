"""Redis's console rollups (docs/console-api.md; the layout in redis/console.py, which reads them):
summed in memory and written once a second by `rollup_writer.RollupWriter`, one pipeline of
HINCRBYs for every (bucket, group) that changed. Apart from redis/console.py so that the store
imports only what it writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..console import RESOLUTIONS
from ..rollup_writer import RollupWriter

_SEP = "\x1f"
_SUM = "\x1e"
_FIELDS = ("r", "e", "i", "o")  # requests, errors, input and output tokens; then cost, then the histogram


def redis_rollups(redis: Callable[[], Any], name: Callable[..., str]) -> RollupWriter:
    """`redis`: the open client (the store's), `name`: its key naming."""

    async def write_rows(rows: list[tuple[Any, ...]]) -> None:
        pipe = redis().pipeline(transaction=False)  # not a transaction: each sum is its own HINCRBY
        expiring: dict[str, int] = {}
        for res, t, model, provider, key_id, *sums in rows:
            key = name("roll", str(res), str(t))
            group = _SEP.join((model, provider, key_id)) + _SUM
            for field, value in zip(_FIELDS, sums[:4], strict=True):
                if value:
                    pipe.hincrby(key, group + field, value)
            if sums[4]:
                pipe.hincrbyfloat(key, group + "c", sums[4])
            for bucket, count in enumerate(sums[5:]):
                if count:
                    pipe.hincrby(key, group + f"h{bucket}", count)
            expiring[key] = RESOLUTIONS[res]
        for key, keep in expiring.items():
            pipe.expire(key, keep)
        await pipe.execute()

    return RollupWriter(write_rows)
