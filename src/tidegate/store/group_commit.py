"""Group commit for the SQLite file store: the writes the event loop asks for in one loop iteration
share one transaction, so one WAL commit (its lock calls, its frames) serves all of them.

Under load the requests of one wave reach their store writes together (the durable record before the
upstream request, the outcome before the answer): at 8 non-stream requests in flight, 6-7 writes came
in the same loop iteration. Each write still returns only once its transaction has committed, as
docs/api-operations.md §7 asks; it waits one loop iteration for the others instead of committing alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")
Write = Callable[[sqlite3.Connection], Any]
Outcome = tuple[bool, Any]  # (True, what the write returned) or (False, the exception it raised)

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
# When the last commits each carried one write (a lone request's: nothing came to share them), the
# next write commits in its caller's own step: its durable record and outcome skip the two turns of
# the event loop a batch costs (the commit's turn, then the caller's wake-up), which are time to first
# token at one stream. A commit that carried several turns batching back on. (A time window did
# worse: 1 ms since the last commit let the gaps between the waves of 8 non-stream requests in flight
# through, each wave's first write committing alone, -3.5 % of their rate; 5 ms since the last write
# missed one stream's requests back to back, whose begin follows the previous one's outcome.)
LONE_COMMITS = 2


def is_locked(exc: sqlite3.OperationalError) -> bool:
    """The database was locked by another writer (busy), not broken."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)


def immediate(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """`fn(db)` in one BEGIN IMMEDIATE transaction: committed, or rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")  # (outside the try: a locked database has nothing to roll back)
    try:
        result = fn(db)
        db.execute("COMMIT")
        return result
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def commit_together(db: sqlite3.Connection, writes: list[Write]) -> list[Outcome]:
    """Every write in one transaction, in order; each one's outcome.

    When one raises (or the commit does), the transaction is rolled back and they run again in one
    transaction with a savepoint each, so a write's failure is its own and the others commit. An
    OperationalError from a BEGIN (the database is locked) propagates with nothing written.
    """
    if len(writes) == 1:  # (a lone write's failure is its own: raised as it is)
        return [(True, immediate(db, writes[0]))]
    try:
        return [(True, result) for result in immediate(db, lambda db: [write(db) for write in writes])]
    except Exception:
        pass
    return immediate(db, lambda db: [_in_savepoint(db, write) for write in writes])


def _in_savepoint(db: sqlite3.Connection, write: Write) -> Outcome:
    db.execute("SAVEPOINT one_write")
    try:
        outcome: Outcome = (True, write(db))
    except Exception as exc:
        db.execute("ROLLBACK TO one_write")
        outcome = (False, exc)
    db.execute("RELEASE one_write")
    return outcome


class _Batch:
    """The writes of one loop iteration, who waits for each, and a future set once all are settled."""

    __slots__ = ("settled", "waiters", "writes")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.writes: list[Write] = []
        self.waiters: list[asyncio.Future[Any]] = []
        self.settled: asyncio.Future[None] = loop.create_future()

    def settle(self, outcomes: list[Outcome]) -> None:
        for done, (ok, value) in zip(self.waiters, outcomes, strict=True):
            if done.done():  # its caller was cancelled
                continue
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)
        self.settled.set_result(None)

    def fail(self, exc: BaseException) -> None:
        for done in self.waiters:
            if not done.done():
                done.set_exception(exc)
        self.settled.set_result(None)


class GroupCommit:
    """Queues the event loop's writes and commits those of one loop iteration together; after
    `LONE_COMMITS` commits of one write each, a write commits at once, in its caller's step.

    A batch runs on the loop's own connection (`loop_db`, busy timeout 0). When another writer holds
    the database (a log flush on the store thread, another worker process, a RESTART checkpoint) the
    batch runs on the store thread instead (`thread_db`, which waits for the lock), and so does every
    batch after it until it is done: a generation's writes land in the order they were asked for even
    when a caller stopped waiting (cancelled) and went on to its next write. `committed(n)` is told
    of each batch of n writes that committed.
    """

    def __init__(
        self,
        loop_db: Callable[[], sqlite3.Connection],
        thread_db: Callable[[], sqlite3.Connection],
        executor: Executor,
        committed: Callable[[int], None],
    ) -> None:
        self._loop_db = loop_db
        self._thread_db = thread_db
        self._executor = executor
        self._committed = committed
        self._pending: _Batch | None = None
        self._on_thread = 0  # batches handed to the store thread and not done yet
        self._lone = 0  # how many commits in a row carried one write each
        self._at_once_this_turn = False  # a write committed at once in this turn: the next ones batch

    async def write(self, write: Write) -> Any:
        """`write(connection)` committed (with the others of this loop iteration); what it returned.

        A caller cancelled meanwhile still has its write committed, and is told of the cancellation
        once it is: what the caller does next (a cleanup's own write, a read) comes after it.
        """
        loop = asyncio.get_running_loop()
        batch = self._pending
        if batch is None and self._lone >= LONE_COMMITS and not self._on_thread and not self._at_once_this_turn:
            self._at_once_this_turn = True  # a wave's other writes in this turn share the next commit
            loop.call_soon(self._next_turn)
            try:
                result = immediate(self._loop_db(), write)
            except sqlite3.OperationalError as exc:
                if not is_locked(exc):
                    raise
            else:  # (a write that raised has raised: it fails alone)
                self._count(1)
                return result
            # (locked: it waits for the store thread in a batch)
        if batch is None:
            batch = self._pending = _Batch(loop)
            loop.call_soon(self._commit_pending)
        done: asyncio.Future[Any] = loop.create_future()
        batch.writes.append(write)
        batch.waiters.append(done)
        try:
            return await done
        except asyncio.CancelledError:
            if not batch.settled.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(batch.settled)
            raise

    def _commit_pending(self) -> None:
        batch, self._pending = self._pending, None
        if batch is None:
            return
        if not self._on_thread:
            try:
                outcomes = commit_together(self._loop_db(), batch.writes)
            except sqlite3.OperationalError as exc:
                if not is_locked(exc):
                    batch.fail(exc)
                    return
            except Exception as exc:
                batch.fail(exc)
                return
            else:
                self._count(len(batch.writes))
                batch.settle(outcomes)
                return
        self._on_thread += 1
        writes = batch.writes
        on_thread = asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: commit_together(self._thread_db(), writes)
        )
        on_thread.add_done_callback(lambda finished: self._settle_from_thread(batch, finished))

    def _settle_from_thread(self, batch: _Batch, finished: asyncio.Future[list[Outcome]]) -> None:
        self._on_thread -= 1
        if finished.cancelled():
            batch.fail(asyncio.CancelledError())
            return
        exc = finished.exception()
        if exc is not None:
            batch.fail(exc)
            return
        self._count(len(batch.writes))
        batch.settle(finished.result())

    def _next_turn(self) -> None:
        self._at_once_this_turn = False

    def _count(self, writes: int) -> None:
        """A batch of `writes` committed."""
        self._lone = self._lone + 1 if writes == 1 else 0
        self._committed(writes)
