from __future__ import annotations

import json
from typing import Any

import pytest

from statewise.models import (
    Message,
    ModelResponse,
    RequestInfo,
    TestModel,
    TextDelta,
    ToolCall,
    ToolDefinition,
)
from statewise.models._schema_args import generate_arguments

pytestmark = pytest.mark.anyio


def tool(
    name: str, properties: dict[str, Any], required: list[str] | None = None
) -> ToolDefinition:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return ToolDefinition(name=name, parameters=schema)


WEATHER = tool("weather", {"city": {"type": "string"}}, ["city"])
ADD = tool("add", {"a": {"type": "integer"}, "b": {"type": "integer", "default": 5}}, ["a"])


async def test_first_request_calls_every_tool_once() -> None:
    response = await TestModel().request(
        [Message(role="user", content="go")], RequestInfo(tools=[WEATHER, ADD])
    )
    assert response.content is None
    assert response.tool_calls == [
        ToolCall("weather", {"city": "a"}, "call_0_0"),
        ToolCall("add", {"a": 0, "b": 5}, "call_0_1"),
    ]
    assert response.usage.requests == 1
    assert response.usage.input_tokens == 1
    assert response.usage.output_tokens > 0


async def test_answers_with_tool_results_as_json() -> None:
    messages = [
        Message(role="user", content="go"),
        Message(
            role="assistant",
            tool_calls=[ToolCall("weather", {}, "call_0_0"), ToolCall("add", {}, "call_0_1")],
        ),
        Message(role="tool", content="sunny", tool_call_id="call_0_0"),
        Message(role="tool", content='{"sum": 5}', tool_call_id="call_0_1"),
    ]
    response = await TestModel().request(messages, RequestInfo(tools=[WEATHER, ADD]))
    assert response.tool_calls == []
    assert response.content == '{"weather": "sunny", "add": {"sum": 5}}'


async def test_repeated_tool_results_are_listed() -> None:
    messages = [
        Message(role="assistant", tool_calls=[ToolCall("f", {}, "1"), ToolCall("f", {}, "2")]),
        Message(role="tool", content="1", tool_call_id="1"),
        Message(role="tool", content="2", tool_call_id="2"),
    ]
    response = await TestModel().request(messages, RequestInfo())
    assert json.loads(response.content or "") == {"f": [1, 2]}


async def test_no_tools_and_custom_text() -> None:
    user = [Message(role="user", content="hi")]
    assert (await TestModel().request(user, RequestInfo())).content == "success (no tool calls)"
    custom = TestModel(custom_output_text="done")
    assert (await custom.request(user, RequestInfo())).content == "done"


async def test_call_tools_subset_and_custom_args() -> None:
    model = TestModel(call_tools=["add"], custom_args={"add": {"a": 41}})
    response = await model.request(
        [Message(role="user", content="x")], RequestInfo(tools=[WEATHER, ADD])
    )
    assert response.tool_calls == [ToolCall("add", {"a": 41, "b": 5}, "call_0_0")]


async def test_new_user_turn_calls_tools_again_with_new_ids() -> None:
    messages = [
        Message(role="user", content="a"),
        Message(role="assistant", tool_calls=[ToolCall("weather", {}, "call_0_0")]),
        Message(role="tool", content="x", tool_call_id="call_0_0"),
        Message(role="assistant", content="done"),
        Message(role="user", content="again"),
    ]
    response = await TestModel().request(messages, RequestInfo(tools=[WEATHER]))
    assert [c.id for c in response.tool_calls] == ["call_2_0"]


async def test_streams_text_answer() -> None:
    model = TestModel(custom_output_text="all good")
    chunks = [c async for c in model.request_stream([], RequestInfo())]
    assert chunks[:2] == [TextDelta(content="all "), TextDelta(content="good")]
    assert isinstance(chunks[2], ModelResponse)


def test_schema_arguments_cover_json_schema_types() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number", "minimum": 2}},
                "required": ["x", "y"],
            }
        },
        "properties": {
            "name": {"type": "string", "minLength": 3},
            "when": {"type": "string", "format": "date"},
            "count": {"type": "integer", "exclusiveMinimum": 0},
            "neg": {"type": "integer", "maximum": -4},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "color": {"enum": ["red", "blue"]},
            "fixed": {"const": 7},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "empty": {"type": "array", "items": {"type": "integer"}, "maxItems": 0},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}]},
            "point": {"$ref": "#/$defs/Point"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
            "nullable": {"type": ["null", "string"]},
            "limit": {"type": "integer", "default": 10},
            "mapping": {"type": "object", "additionalProperties": {"type": "integer"}},
            "anything": {},
        },
        "required": ["name", "count"],
    }
    assert generate_arguments(schema) == {
        "name": "aaa",
        "when": "2024-01-01",
        "count": 1,
        "neg": -4,
        "ratio": 0.0,
        "flag": False,
        "color": "red",
        "fixed": 7,
        "tags": ["a", "a"],
        "empty": [],
        "pair": [0, False],
        "point": {"x": 0.0, "y": 2.0},
        "maybe": 0,
        "nullable": "a",
        "limit": 10,
        "mapping": {},
        "anything": "a",
    }


def test_schema_arguments_deeply_nested_keep_required_only() -> None:
    leaf = {
        "type": "object",
        "properties": {"r": {"type": "integer"}, "o": {"type": "integer"}},
        "required": ["r"],
    }
    schema = {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {"b": {"type": "object", "properties": {"c": leaf}}},
            }
        },
    }
    assert generate_arguments(schema) == {"a": {"b": {"c": {"r": 0}}}}


def test_recursive_schema_terminates() -> None:
    schema = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"value": {"type": "integer"}, "next": {"$ref": "#/$defs/Node"}},
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/Node",
    }
    assert generate_arguments(schema) == {
        "value": 0,
        "next": {"value": 0, "next": {"value": 0, "next": {"value": 0}}},
    }
