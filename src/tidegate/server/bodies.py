"""Request bodies still arriving count against their key's `concurrent` limit (docs/security.md,
"Slow request bodies").

A key's `concurrent` limit is checked at admission, after the body is read: without this, one key
could hold any number of connections open, each sending its body a byte at a time, and none of them
would count. Counted per worker, from authentication to the body's last byte.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import RateLimited
from ..records import ApiKey


def _nothing() -> None:
    return None


class UnfinishedBodies:
    """How many bodies each key is sending to this worker right now."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def enter(self, key: ApiKey) -> Callable[[], None]:
        """A slot for one body of `key` (429 when its `concurrent` limit is taken by bodies still
        arriving); the function returned frees it, once, however often it is called."""
        limit = key.limits.concurrent
        if limit is None:
            return _nothing
        count = self._counts.get(key.id, 0)
        if count >= limit:
            raise RateLimited(
                f"this key has {count} request bodies still arriving, its concurrent limit",
                retry_after=1.0,
            )
        self._counts[key.id] = count + 1
        freed = False

        def free() -> None:
            nonlocal freed
            if freed:
                return
            freed = True
            left = self._counts[key.id] - 1
            if left:
                self._counts[key.id] = left
            else:
                del self._counts[key.id]

        return free
