from __future__ import annotations

import pytest

from statewise.models import ModelResponse, TextDelta, ToolCall, ToolCallDelta
from statewise.models._assemble import StreamAssembler, parse_arguments


@pytest.mark.parametrize(
    ("raw", "arguments"),
    [
        ("", {}),
        ("  ", {}),
        (None, {}),
        ("null", {}),
        ('{"a": [1, {"b": null}]}', {"a": [1, {"b": None}]}),
    ],
)
def test_valid_arguments(raw: str | None, arguments: dict[str, object]) -> None:
    assert parse_arguments(raw) == (arguments, None)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (
            '{"a": 1',
            "tool arguments are not valid JSON (Expecting ',' delimiter at position 7): '{\"a\": 1'",
        ),
        ("[1, 2]", "tool arguments must be a JSON object, got list: '[1, 2]'"),
        ('"text"', "tool arguments must be a JSON object, got str: '\"text\"'"),
    ],
)
def test_invalid_arguments(raw: str, error: str) -> None:
    assert parse_arguments(raw) == ({}, error)


def test_assembler_merges_by_index_in_index_order() -> None:
    assembler = StreamAssembler()
    chunks: list[TextDelta | ToolCallDelta] = [
        ToolCallDelta(index=1, id="b", name="second", arguments_delta='{"x"'),
        TextDelta(content="a"),
        ToolCallDelta(index=0, id="a", name="first"),
        ToolCallDelta(index=1, id="", name="", arguments_delta=": 1}"),
        TextDelta(content="b"),
    ]
    for chunk in chunks:
        assert assembler.add(chunk) is chunk
    assert assembler.response() == ModelResponse(
        content="ab",
        tool_calls=[ToolCall("first", {}, "a"), ToolCall("second", {"x": 1}, "b")],
    )
