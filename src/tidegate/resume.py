"""A coroutine started outside a task (its first step run by hand) and finished inside one.

`UpstreamOpen` runs an upstream open's first step in the caller's turn; a write driven from a
protocol callback (`Request.write_now`) runs uvicorn's `send` by hand. When such a step yields (the
coroutine waits on a future), `Resume` is what a task awaits to carry on from there.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any


class Resume:
    """Awaiting this resumes a coroutine whose first step already ran and yielded `pending` (what
    `yield from` would do had it not started the coroutine itself): the awaiting task waits on
    `pending`, then sends into and throws into the coroutine exactly as it would for its own."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self._coro = coro
        self._pending = pending

    def __await__(self) -> Generator[Any, None, Any]:
        coro, pending = self._coro, self._pending
        self._pending = None
        while True:
            try:
                yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation (or anything thrown in): the coroutine's to handle
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                pending = coro.send(None)
            except StopIteration as stop:
                return stop.value
