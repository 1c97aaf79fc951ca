"""The OpenAI chat emulator (openai_upstream.py) plus a model that uses an agent's shell tool, in the
same Chat Completions wire format (its chunk, usage and `[DONE]` writers).

Scenario `shell`: when the last message is not a tool result, one call of `exec_command` (Codex
CLI's shell tool) with `{"cmd": SHELL_COMMAND}`, its arguments in two pieces; after a tool result,
the text `Tool said: <the result's last line>` (Codex puts the command's output last). Scenario
`calltools`: the same, calling every tool of the request once with `{}`. Scenario `readfile`: Claude
Code's `Read` on the `.txt` path the prompt names, then `Tool said: <the file's line with
READ_MARKER>`. Scenario `read_file`: the same with Gemini CLI's `read_file` (`{"file_path"}`; its result
`{"output": <the file>}` as the Gemini door translates a functionResponse). Any other scenario is the
base emulator's.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.emulators.anthropic_upstream import SHELL_COMMAND, read_answer, read_path
from tests.emulators.openai_upstream import OpenAIUpstream, Recorded


def _tool_result(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") != "tool":
        return None
    content = last.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _read_result(body: dict[str, Any]) -> str | None:
    """The tool messages after the last assistant message (Claude Code may add user and system
    messages after them), or None when the last call is not answered yet."""
    messages = body.get("messages") or []
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    results = [str(m.get("content")) for m in messages[last + 1 :] if last >= 0 and m.get("role") == "tool"]
    return "\n".join(results) if results else None


class AgentOpenAIUpstream(OpenAIUpstream):
    def _readfile_chunks(self, rec: Recorded, model: str) -> list[bytes]:
        result = _read_result(rec.body)
        if result is not None and rec.scenario == "read_file":  # a functionResponse's `response` as JSON
            result = str(json.loads(result).get("output"))
        if result is not None:
            return [
                self._chunk(rec, model, {"role": "assistant", "content": "Tool said: "}),
                self._chunk(rec, model, {"content": read_answer(result)}),
                self._chunk(rec, model, {}, "stop"),
            ]
        texts = []
        for m in rec.body.get("messages") or []:
            content = m.get("content")
            if m.get("role") == "user":
                texts += [content] if isinstance(content, str) else [str(p.get("text", "")) for p in content or []]
        args = json.dumps({"file_path": read_path(texts)})
        fn = {"name": "read_file" if rec.scenario == "read_file" else "Read", "arguments": ""}
        call = {"index": 0, "id": "call_emu_read", "type": "function", "function": fn}
        return [
            self._chunk(rec, model, {"role": "assistant", "content": None, "tool_calls": [call]}),
            self._chunk(rec, model, {"tool_calls": [{"index": 0, "function": {"arguments": args[:9]}}]}),
            self._chunk(rec, model, {"tool_calls": [{"index": 0, "function": {"arguments": args[9:]}}]}),
            self._chunk(rec, model, {}, "tool_calls"),
        ]

    def _shell_chunks(self, rec: Recorded, model: str) -> list[bytes]:
        result = _tool_result(rec.body)
        if result is not None:
            return [
                self._chunk(rec, model, {"role": "assistant", "content": "Tool said: "}),
                self._chunk(rec, model, {"content": (result.strip().splitlines() or [""])[-1]}),
                self._chunk(rec, model, {}, "stop"),
            ]
        if rec.scenario == "calltools":
            names = [str((t.get("function") or {}).get("name")) for t in rec.body.get("tools") or []]
            calls = [(name, "{}") for name in names]
        else:
            calls = [("exec_command", json.dumps({"cmd": SHELL_COMMAND}))]
        out = []
        for i, (name, args) in enumerate(calls):
            fn = {"name": name, "arguments": ""}
            call = {"index": i, "id": f"call_emu_{i}", "type": "function", "function": fn}
            head = {"role": "assistant", "content": None} if i == 0 else {}
            out.append(self._chunk(rec, model, {**head, "tool_calls": [call]}))
            for piece in (args[:9], args[9:]):
                if piece:
                    out.append(
                        self._chunk(rec, model, {"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                    )
        return [*out, self._chunk(rec, model, {}, "tool_calls")]

    async def _play(
        self,
        request: web.Request,
        response: web.StreamResponse,
        rec: Recorded,
        scenario: str,
        arg: float | None,
        model: str,
    ) -> None:
        if scenario not in ("shell", "calltools", "readfile", "read_file"):
            await super()._play(request, response, rec, scenario, arg, model)
            return
        reads = scenario in ("readfile", "read_file")
        chunks = self._readfile_chunks(rec, model) if reads else self._shell_chunks(rec, model)
        for payload in chunks:
            await self._send(request, response, rec, payload)
        if self._include_usage(rec):
            await self._send(request, response, rec, self._usage_chunk(rec, model))
        await self._done(response, rec)
