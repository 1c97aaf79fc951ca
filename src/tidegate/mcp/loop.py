"""The model ↔ MCP tool loop (docs/api-operations.md §13): model turns through the generation's own relay (same
routes, fallback, record and cancel signal), tool calls through `McpServers`, one buffered answer.

Each model turn runs the relay once, non-streaming. Its events are observed by the recorder like any
generation's, except usage: every turn's report is summed here and handed to the recorder once, so
the record and the answer bill every turn. The loop ends when a turn asks for no MCP tool, when it
asks for a function tool the client must run (returned as a `function_call` item), or at
`max_turns` (the calls of that last turn are reported as `mcp_call` items with an error, not run).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..commit import Committed
from ..events import Event, Failed, TextDelta, UsageReport
from ..gateway.generation import Generation
from ..gateway.relay import KEEPALIVE, Relay
from ..render.responses import ResponseState
from .client import McpServers


@dataclass(slots=True)
class LoopResult:
    """What the doors render: output items in order, the final turn's events, usage over all turns."""

    items: list[dict[str, Any]] = field(default_factory=list)
    final_events: list[Event] = field(default_factory=list)
    usage: UsageReport | None = None
    committed: Committed | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # per MCP call: what the record keeps
    failure: Failed | None = None


def _add(total: UsageReport | None, report: UsageReport) -> UsageReport:
    if total is None:
        return report

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return UsageReport(
        total.prompt + report.prompt,
        total.completion + report.completion,
        plus(total.reasoning, report.reasoning),
        plus(total.cached, report.cached),
        total.estimated or report.estimated,
        plus(total.cache_write, report.cache_write),
    )


def list_tools_items(gen_id: str, servers: McpServers) -> list[dict[str, Any]]:
    return [
        {
            "id": f"mcpl_{gen_id}_{i}",
            "type": "mcp_list_tools",
            "server_label": spec.label,
            "tools": [t.listed() for t in servers.listed.get(spec.label, [])],
            "error": None,
        }
        for i, spec in enumerate(servers.specs)
    ]


async def _turn(gen: Generation, result: LoopResult) -> list[Event] | None:
    """One model turn: its events (usage taken out and summed), or None when the turn failed."""
    events: list[Event] = []
    observe = gen.recorder.observe
    async with contextlib.aclosing(gen.items()) as items:
        async for item in items:
            if isinstance(item, Committed):
                result.committed = item
                events = []  # a fallback route serves: what an earlier one produced is gone
                continue
            if item is KEEPALIVE:
                continue
            for event in item:  # type: ignore[union-attr]
                if isinstance(event, UsageReport):
                    result.usage = _add(result.usage, event)
                    continue
                observe(event)
                if isinstance(event, Failed):
                    result.failure = event
                    return None
                events.append(event)
    return events


def _arguments(text: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def run_loop(gen: Generation, servers: McpServers, max_turns: int, result: LoopResult) -> LoopResult:
    """Turns until the model answers (see the module's rule); `result.failure` set when a turn failed.
    `result` is filled as the loop goes, so that the calls made before a failure are still known."""
    result.items = list_tools_items(gen.id, servers)
    request = gen.request
    for turn in range(max_turns):
        if turn:
            old = gen.relay
            gen.relay = Relay(request, old.routes, old.settings, old.cancel, old.health, old.breakers, old.excluded)
        events = await _turn(gen, result)
        if events is None:
            return result
        state = ResponseState(f"{gen.id}_{turn}")
        for event in events:
            state.feed(event)
        state.close_all("completed")
        output = state.output("completed")
        calls = [o for o in output if o["type"] == "function_call"]
        if not any(c["name"] in servers.tools for c in calls) or any(c["name"] not in servers.tools for c in calls):
            result.items += output  # the answer, or calls the client must run itself
            result.final_events = events
            return result
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None, "tool_calls": []}
        replies: list[dict[str, Any]] = []
        last = turn == max_turns - 1
        for item in output:
            if item["type"] != "function_call":
                result.items.append(item)
                continue
            tool = servers.tools[item["name"]]
            call: dict[str, Any] = {
                "id": f"mcp_{gen.id}_{turn}_{len(replies)}",
                "type": "mcp_call",
                "server_label": tool.server.label,
                "name": tool.name,
                "arguments": item["arguments"],
                "output": None,
                "error": None,
                "approval_request_id": None,
                "status": "completed",
            }
            started = time.monotonic()
            args = _arguments(item["arguments"])
            if last:
                call["error"] = f"not called: the gateway's turn limit ([mcp] max_turns = {max_turns}) was reached"
            elif args is None:
                call["error"] = "the model's arguments are not a JSON object"
            else:
                call["output"], call["error"] = await servers.call(tool, args)
            if call["error"] is not None:
                call["status"] = "failed"
            result.items.append(call)
            result.calls.append(
                {
                    "name": tool.name,
                    "server_label": tool.server.label,
                    "arguments_bytes": len(item["arguments"].encode()),
                    "duration_ms": round((time.monotonic() - started) * 1000, 3),
                    "error": call["error"],
                }
            )
            await gen.recorder.save_progress()  # the calls so far survive a crash of this gateway
            assistant["tool_calls"].append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
            reply = call["output"] if call["error"] is None else f"Error: {call['error']}"
            replies.append({"role": "tool", "tool_call_id": item["call_id"], "content": reply})
        if last:
            result.final_events = events
            return result
        request.messages = [*request.messages, assistant, *replies]
    return result
