"""The server process's cyclic garbage collector, settled once startup is done.

Thousands of open streams mean close to a million GC-tracked objects, and a full (generation 2)
collection walks every one of them with the event loop stopped: at 5,000 open streams that was
~0.6 s, long enough to make keep-alives late (docs/performance.md). Two standard remedies:

- `gc.freeze()` after startup: modules, config, the provider clients and everything else built
  before the first request move to the permanent generation, which no collection walks again.
- A larger first-generation threshold: a request's short-lived objects die before the collector
  sees them instead of being promoted on every 700th allocation, so far fewer survivors reach
  generation 2 and full collections become rare. Generation 1 stays small (10 young collections),
  so no young collection grows into a long pause.

Only the server's worker processes call `settle`; the library and the CLI keep Python's defaults.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # CPython's default is 700
MIDDLE_THRESHOLD = 10
OLD_THRESHOLD = 10


def settle() -> None:
    """Collect what startup left behind, freeze the survivors, raise the young threshold."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
