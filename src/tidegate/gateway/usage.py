"""Usage accounting: provider-reported usage, estimation with a real tokenizer, and pricing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..config.model import Pricing
from ..events import UsageReport

_encoding: Any = None
_lock = threading.Lock()


def _get_encoding() -> Any:
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                import bpe_openai

                _encoding = bpe_openai.get_encoding("o200k_base")
    return _encoding


def tokenizer_loaded() -> bool:
    return _encoding is not None


async def tokenizer_ready() -> None:
    """Load the tokenizer on a thread if it is not loaded yet. Importing it takes about a second and
    ~100 MB, so it happens on the first estimate, never on the event loop (that would stall every
    open stream): async code awaits this before anything that may estimate."""
    if _encoding is None:
        await asyncio.to_thread(_get_encoding)


# The tokenizer refuses a call of 1,000,000 characters or more, or one whose tokens exceed 200,000
# (and one character can be several tokens: four bytes of UTF-8, four tokens). Text is counted in
# pieces well under both, cut at a space near the boundary where there is one, so a few tokens at
# most per piece are split. Encoding runs at ~10 MB/s here: the 4 MiB a body may hold, or any output
# a stream produced, costs a bounded fraction of a second, and counting never fails.
_PIECE_CHARS = 32_768
_CUT_SEARCH = 256


def count_tokens(text: str) -> int:
    """Tokens of `text` under o200k_base (offline; an estimate for non-OpenAI models)."""
    if not text:
        return 0
    encode = _get_encoding().encode
    if len(text) <= _PIECE_CHARS:
        return len(encode(text, disallowed_special=()))
    total, start, end_of_text = 0, 0, len(text)
    while start < end_of_text:
        end = min(end_of_text, start + _PIECE_CHARS)
        if end < end_of_text:
            space = text.rfind(" ", end - _CUT_SEARCH, end)
            if space > start:
                end = space
        total += len(encode(text[start:end], disallowed_special=()))
        start = end
    return total


def _message_text(message: dict[str, Any]) -> str:
    parts: list[str] = [str(message.get("role", ""))]
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(str(fn.get("name", "")))
        parts.append(str(fn.get("arguments", "")))
    return "\n".join(parts)


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    # ~3 tokens of chat framing per message, as OpenAI's own cookbook counts them
    return sum(count_tokens(_message_text(m)) + 3 for m in messages) + 3


QUICK_COUNT_CHARS = 8_192  # ~0.8 ms of encoding: what one stream's first event may spend counting


def quick_prompt_estimate(messages: list[dict[str, Any]]) -> int:
    """The prompt's tokens when a stream's first event must say them before the upstream has: the
    tokenizer's count for a prompt of up to QUICK_COUNT_CHARS, ~4 characters a token past it or while
    the tokenizer is not loaded (never encoded at length, nor loaded, in the loop's step)."""
    texts = [_message_text(m) for m in messages]
    size = sum(len(text) for text in texts)
    if _encoding is None or size > QUICK_COUNT_CHARS:
        return size // 4 + 3 * len(messages) + 3
    return sum(count_tokens(text) + 3 for text in texts) + 3


def estimate_usage(messages: list[dict[str, Any]], output_text: str, reasoning_text: str = "") -> UsageReport:
    reasoning = count_tokens(reasoning_text) if reasoning_text else 0
    return UsageReport(
        prompt=estimate_prompt_tokens(messages),
        completion=count_tokens(output_text) + reasoning,
        reasoning=reasoning or None,
        estimated=True,
    )


def rough_usage(messages: list[dict[str, Any]], output_text: str, reasoning_text: str = "") -> UsageReport:
    """The estimate of last resort, ~4 characters a token: what is billed if counting ever fails, or
    when a stop interrupts a generation before the tokenizer was ever loaded."""
    prompt = sum(len(_message_text(m)) for m in messages) // 4 + 3 * len(messages) + 3
    reasoning = len(reasoning_text) // 4
    return UsageReport(
        prompt=prompt,
        completion=len(output_text) // 4 + reasoning,
        reasoning=reasoning or None,
        estimated=True,
    )


def cost_of(usage: UsageReport, pricing: Pricing | None) -> float:
    """USD, with pricing in USD per million tokens."""
    if pricing is None:
        return 0.0
    read, written = usage.cached or 0, usage.cache_write or 0
    cache_read = pricing.prompt if pricing.cache_read is None else pricing.cache_read
    cache_write = pricing.prompt if pricing.cache_write is None else pricing.cache_write
    prompt = (usage.prompt - read - written) * pricing.prompt + read * cache_read + written * cache_write
    return (prompt + usage.completion * pricing.completion) / 1_000_000
