"""The o200k tokenizer takes about a second (and ~100 MB) to load: it loads on the first estimate,
on a thread, never on the event loop, where it would stall every open stream. A fresh interpreter
is the only place where it is not loaded yet."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import asyncio, json, time
from tidegate.gateway import usage

async def main():
    gaps, done = [], False

    async def ticker():
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    await usage.tokenizer_ready()
    took = time.perf_counter() - started
    done = True
    await task
    print(json.dumps({"max_gap": max(gaps), "took": took, "tokens": usage.count_tokens("hello world")}))

asyncio.run(main())
"""


def test_the_tokenizer_loads_on_a_thread_while_the_loop_keeps_running() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    probe = json.loads(out.stdout)
    assert probe["tokens"] == 2
    assert probe["took"] > 0.1  # it really loaded here
    assert probe["max_gap"] < probe["took"] / 2 and probe["max_gap"] < 0.3, probe
