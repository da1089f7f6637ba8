from __future__ import annotations

import json
from pathlib import Path

import pytest

from statewise.exceptions import CassetteExhaustedError, CassetteMismatchError, ConfigurationError
from statewise.models import (
    FunctionModel,
    Message,
    ModelResponse,
    RecordingModel,
    ReplayModel,
    RequestInfo,
    TestModel,
    TextDelta,
    ToolCall,
    ToolDefinition,
    Usage,
)

pytestmark = pytest.mark.anyio

TOOL = ToolDefinition(
    name="add", parameters={"type": "object", "properties": {"a": {"type": "integer"}}}
)
FIRST = [Message(role="user", content="add one")]
SECOND = [
    *FIRST,
    Message(role="assistant", tool_calls=[ToolCall("add", {"a": 0}, "call_0_0")]),
    Message(role="tool", content="1", tool_call_id="call_0_0"),
]


async def record(path: Path) -> list[ModelResponse]:
    model = RecordingModel(TestModel(), path)
    info = RequestInfo(tools=[TOOL], run_id="r1", step=1)
    return [await model.request(FIRST, info), await model.request(SECOND, info)]


async def test_record_then_replay_returns_same_responses(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    recorded = await record(cassette)
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert lines[0] == {
        "request": {
            "messages": [{"role": "user", "content": "add one"}],
            "tools": [{"name": "add", "description": "", "parameters": TOOL.parameters}],
        },
        "response": {
            "content": None,
            "tool_calls": [{"name": "add", "arguments": {"a": 0}, "id": "call_0_0"}],
            "usage": recorded[0].usage.to_dict(),
            "model_name": "test",
        },
    }
    replay = ReplayModel(cassette)
    info = RequestInfo(tools=[TOOL], run_id="another-run", step=7)
    assert await replay.request(FIRST, info) == recorded[0]
    assert await replay.request(SECOND, info) == recorded[1]
    assert replay.remaining == 0


async def test_recording_starts_fresh_unless_append(tmp_path: Path) -> None:
    cassette = tmp_path / "sub" / "c.jsonl"
    await record(cassette)
    await record(cassette)
    assert len(cassette.read_text().splitlines()) == 2
    model = RecordingModel(TestModel(), cassette, append=True)
    await model.request(FIRST, RequestInfo())
    assert len(cassette.read_text().splitlines()) == 3


async def test_strict_mismatch_shows_diff(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    await record(cassette)
    replay = ReplayModel(cassette)
    with pytest.raises(CassetteMismatchError) as info:
        await replay.request([Message(role="user", content="add two")], RequestInfo(tools=[TOOL]))
    message = str(info.value)
    assert message.startswith("request 1 differs from cassette")
    assert '-   "content": "add one",' in message
    assert '+   "content": "add two",' in message
    assert replay.remaining == 2  # a failed match consumes nothing


async def test_lenient_replay_ignores_requests_and_exhaustion(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    recorded = await record(cassette)
    replay = ReplayModel(cassette, strict=False)
    assert await replay.request([], RequestInfo()) == recorded[0]
    assert await replay.request([], RequestInfo()) == recorded[1]
    with pytest.raises(CassetteExhaustedError, match="has 2 exchanges and all were replayed"):
        await replay.request([], RequestInfo())


async def test_streams_record_final_and_replay_deltas(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    model = RecordingModel(
        FunctionModel(lambda m, i: ModelResponse(content="hello world", usage=Usage(requests=1))),
        cassette,
    )
    recorded = [c async for c in model.request_stream(FIRST, RequestInfo())]
    assert len(cassette.read_text().splitlines()) == 1
    replayed = [c async for c in ReplayModel(cassette).request_stream(FIRST, RequestInfo())]
    assert replayed[:2] == [TextDelta(content="hello "), TextDelta(content="world")]
    assert replayed[-1] == recorded[-1]


def test_bad_cassettes(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read cassette"):
        ReplayModel(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request": {}}\n')
    with pytest.raises(ConfigurationError, match="line 1 is not a recorded exchange"):
        ReplayModel(bad)
