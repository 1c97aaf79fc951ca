"""The chat door's frame log takes each render as one frame (`_ChatStream.one_frame_per_event`): that
holds only while the chat renderer never returns more than one frame for an event, passthrough or not.
"""

from __future__ import annotations

import pytest

from tidegate.events import (
    Event,
    Failed,
    Finished,
    Image,
    PartialImage,
    Progress,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from tidegate.render.chat import ChatStreamRenderer
from tidegate.server.doors.chat.handler import _ChatStream

EVENTS: list[Event] = [
    Started("p", "served", "up-1"),
    ReasoningDelta("think"),
    ReasoningDelta("", signature="sig=="),
    ReasoningDelta("", "encrypted", None, "opaque"),
    TextDelta("héllo"),
    TextDelta(""),
    ToolCallDelta(0, '{"q":', "call_1", "lookup"),
    ToolCallDelta(0, "1}"),
    ToolCallDelta(1, "{}", "call_2", "other"),
    UsageReport(10, 5, 2, 3),
    Progress(40, "generating"),
    PartialImage(0, "aGk="),
    Image("aGk="),
    Finished("tool_calls"),
    Failed("upstream_error", "boom", "p"),
]


@pytest.mark.parametrize("passthrough", [False, True], ids=["translated", "passthrough"])
def test_every_event_renders_as_at_most_one_frame(passthrough: bool) -> None:
    assert _ChatStream.one_frame_per_event
    renderer = ChatStreamRenderer(generation_id="g", public_model="m", created=1, include_usage=True)
    rendered = []
    if passthrough:
        rendered.append(renderer.render(RawFrame(b'{"id":"up-1","choices":[{"index":0,"delta":{"content":"a"}}]}')))
    for event in EVENTS:
        rendered.append(renderer.render(event))
        if passthrough:
            rendered.append(renderer.render(RawFrame(b'{"id":"up-1","choices":[]}')))
    frames = [out for out in rendered if out]
    assert len(frames) >= (len(EVENTS) if passthrough else 6)  # the test renders frames at all
    for out in frames:
        assert out.endswith(b"\n\n") and out.count(b"\n\n") == 1, out
    ids = [int(out[4 : out.index(b"\n")]) for out in frames]
    assert ids == list(range(len(frames)))  # one SSE id per frame: the frame log's index


def test_a_finish_reason_the_upstream_did_not_say_is_not_shown() -> None:
    # a cache hit of an answer whose upstream ended with [DONE] alone (providers/openai/chat.py)
    renderer = ChatStreamRenderer(generation_id="g", public_model="m", created=1, include_usage=False)
    assert renderer.render(TextDelta("a"))
    assert renderer.render(Finished("stop", said=False)) == b""
    assert b'"finish_reason":"stop"' in renderer.render(Finished("stop"))
