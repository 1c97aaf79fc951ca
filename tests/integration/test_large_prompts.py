"""A ~1,000,000-character prompt whose usage must be estimated.

The tokenizer raises `Input too long to encode safely` on such a text; raised inside the recorder's
finish it would leave a keyless stream whose client dropped `in_progress` with cost 0, end a streamed
answer after its `stop` chunk with neither `[DONE]` nor the failure chunk, and turn a non-stream answer
into a 500 after the upstream had answered. Each ends as the contract says and is billed
(docs/api-edges.md §16).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, start_server
from tests.support.records import wait_record
from tests.support.streams import RawStream, stream_sse

CHAT = "/v1/chat/completions"
HUGE = "lorem ipsum dolor sit amet " * 40_000  # 1,080,000 characters, ~1 MB of body


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("large")
    with OpenAIUpstream() as emu:
        config = tidegate_toml(
            f"sqlite:///{tmp / 'g.db'}",
            {"emu": {"kind": "openai", "base_url": emu.base_url}},
            {"quiet": [("emu", "no-usage")], "endless": [("emu", "slow:0.05")]},
        ).replace('[models."quiet"]', '[models."quiet"]\npricing = { prompt = 1.0, completion = 2.0 }')
        config = config.replace(
            '[models."endless"]', '[models."endless"]\npricing = { prompt = 1.0, completion = 2.0 }'
        )
        server = start_server(tmp / "gw", config)
        try:
            yield server
        finally:
            server.stop()


def _body(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": HUGE}]}


def test_a_streamed_answer_with_an_estimated_huge_prompt_ends_with_done_and_is_billed(gateway: ServerProcess) -> None:
    result = stream_sse(gateway.base_url + CHAT, _body("quiet", True), gateway.headers, timeout=60)
    assert result.status == 200 and result.done
    usage = result.json_events()[-1]["usage"]
    assert usage["prompt_tokens"] > 200_000
    record = wait_record(gateway, result.headers["x-generation-id"])
    assert record["status"] == "completed" and record["usage_estimated"] is True
    assert record["cost"] == pytest.approx((usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6)


def test_a_non_stream_answer_with_an_estimated_huge_prompt_is_200(gateway: ServerProcess) -> None:
    resp = httpx.post(gateway.base_url + CHAT, json=_body("quiet", False), headers=gateway.headers, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["prompt_tokens"] > 200_000


def test_a_dropped_keyless_stream_with_a_huge_prompt_is_cancelled_and_billed_within_2_s(
    gateway: ServerProcess,
) -> None:
    stream = RawStream(gateway.base_url, CHAT, _body("endless", True), gateway.headers)
    stream.read_events(5)
    gid = stream.headers["x-generation-id"]
    stream.close()
    dropped = time.monotonic()
    record = wait_record(gateway, gid, within_s=2.0)
    assert record["status"] == "cancelled", f"{record['status']} {time.monotonic() - dropped:.1f} s after the drop"
    assert record["usage"]["prompt_tokens"] > 200_000 and record["usage_estimated"] is True
    assert record["cost"] > 0.2  # over 200k prompt tokens at 1 USD per million
