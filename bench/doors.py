"""The agent doors' passthrough cost: CPU per paced event of the Responses door on
an `openai` route with `responses = true`, the Messages door on an `anthropic` route and the Gemini
door on a `gemini` route, each as a ratio to the chat door on an `openai` route, the same tidegate
in the same run, rounds interleaved door by door (budget ≤ 1.2 ×). Measured as `cost` measures it
(scenarios.py): the same arrivals once with 1 paced chunk per stream and once with 50; CPU per paced
chunk = (50-chunk CPU − 1-chunk CPU) / (streams × 49).
"""

from __future__ import annotations

import statistics
from typing import Any

import scenarios as sc

# (door, the route `load` is given)
DOORS = (("chat", "openai"), ("responses", "responses"), ("messages", "messages"), ("gemini", "gemini"))


def _per_chunk(ctx: sc.Ctx, target: sc.Target, door: str, route: str, n: int) -> float | None:
    v = f"{door} door passthrough, {n} streams, 256 in flight, 256 new/s, 1 vs 50 chunks @ 20 ms"
    runs: list[dict[str, Any] | None] = [
        sc.load(ctx, target, "doors", f"{v} ({shape})", shape, route, concurrency=256, requests=n, ramp=256.0)
        for shape in ("bench-1x20", "bench-50x20")
    ]
    one, many = runs
    if one is None or many is None:
        return None
    cpu = [float((out["watch"].get("gw") or out["watch"]["emu"])["cpu_s"]) for out in (one, many)]
    return max(0.0, cpu[1] - cpu[0]) * 1e6 / (n * 49)


def doors(ctx: sc.Ctx) -> list[sc.Row]:
    n = 256 if ctx.quick else 768
    rows: list[sc.Row] = []
    for target in [t for t in ctx.targets if t.gateway and t.name.startswith("tidegate")]:
        samples: dict[str, list[float]] = {door: [] for door, _ in DOORS}
        for _ in range(ctx.rounds):
            for door, route in DOORS:
                value = _per_chunk(ctx, target, door, route, n)
                if value is not None:
                    samples[door].append(value)
        chat = statistics.median(samples["chat"]) if samples["chat"] else None
        for door, _ in DOORS:
            own = statistics.median(samples[door]) if samples[door] else None
            row = sc.Row("doors", f"{door} door passthrough", "CPU per paced event", "µs", {target.name: own})
            if door != "chat" and own is not None and chat:
                row.budget = "≤ 1.2 × chat passthrough"
                row.ok = sc.check(own / chat, 1.2)
                row.note = f"÷ chat passthrough {chat:.1f} µs: ×{own / chat:.2f} (rounds: {samples[door]})"
            elif door == "chat":
                row.note = f"rounds: {samples[door]}"
            rows.append(row)
    return rows
