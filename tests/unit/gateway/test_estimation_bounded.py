"""Usage estimation never fails and takes bounded CPU (docs/api-edges.md §16): any text a body may carry
(4 MiB) or a stream may produce is counted, in pieces under the tokenizer's own per-call limits
(1,000,000 characters, 200,000 tokens), which used to raise `Input too long to encode safely`."""

from __future__ import annotations

import random
import string
import time

import pytest

from tidegate.gateway.usage import _get_encoding, count_tokens, estimate_usage, rough_usage

random.seed(11)
NOISE = "".join(random.choice(string.printable) for _ in range(1_100_000))


@pytest.mark.parametrize(
    "text",
    ["hello world " * 350_000, "x" * 4_000_000, NOISE, "\U0001f600" * 1_000_000, "é" * 2_000_000],
    ids=["words-4.2M", "one-char-4M", "noise-1.1M", "emoji-1M (4 tokens each)", "accents-2M"],
)
def test_any_large_text_is_counted_in_bounded_time(text: str) -> None:
    t0 = time.process_time()
    tokens = count_tokens(text)
    took = time.process_time() - t0
    assert tokens >= len(text) // 8
    assert took < 5.0, f"{took:.2f} s of CPU for {len(text):,} characters"


def test_counting_in_pieces_matches_the_whole_where_the_tokenizer_can_count_the_whole() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 3_000  # 135k characters, under its limits
    whole = len(_get_encoding().encode(text, disallowed_special=()))
    assert abs(count_tokens(text) - whole) <= 3  # a piece boundary splits at most a token or so


def test_a_huge_prompt_is_estimated_not_refused() -> None:
    usage = estimate_usage([{"role": "user", "content": "word " * 800_000}], "an answer", "")
    assert usage.estimated and usage.prompt > 700_000 and usage.completion > 0


def test_the_rough_estimate_of_last_resort() -> None:
    usage = rough_usage([{"role": "user", "content": "a" * 4000}], "b" * 400, "c" * 40)
    assert (usage.prompt, usage.completion, usage.reasoning, usage.estimated) == (
        1007,
        110,
        10,
        True,
    )  # "user\n" + 4000 characters, +3 a message, +3
