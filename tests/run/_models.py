"""Scripted models the run tests share."""

from __future__ import annotations

from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def call_tool(name: str) -> FunctionModel:
    """A model that calls tool `name` once (no arguments), then answers with its result."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content=messages[-1].content or "")
        return ModelResponse(tool_calls=[ToolCall(name, {}, "c1")])

    return FunctionModel(fn)
