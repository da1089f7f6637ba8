"""OpenAI Chat Completions wire shapes (`chat.completion`, `chat.completion.chunk`)."""

from __future__ import annotations

import json
from typing import Any

from tests.models.fakes.server import Reply, sse_event


def completion(
    content: str | None = None,
    tool_calls: list[tuple[str, str, str]] | None = None,
    *,
    model: str = "gpt-test",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> Reply:
    """A complete answer; `tool_calls` are `(id, name, arguments_json)`."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    return Reply(
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def _chunk(delta: dict[str, Any], finish: str | None = None, model: str = "gpt-test") -> str:
    return sse_event(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
    )


def stream(
    text_pieces: list[str] = (),  # type: ignore[assignment]
    tool_calls: list[tuple[str, str, list[str]]] | None = None,
    *,
    usage: tuple[int, int] | None = (5, 3),
) -> Reply:
    """A streamed answer: text pieces, then each tool call `(id, name, argument_pieces)`
    as a first chunk with id and name followed by argument chunks, then a usage chunk
    with empty `choices` (as `stream_options.include_usage` gives) and `[DONE]`."""
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": piece}) for piece in text_pieces]
    for index, (call_id, name, pieces) in enumerate(tool_calls or []):
        first = {"index": index, "id": call_id, "type": "function"}
        events.append(
            _chunk({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]})
        )
        events += [
            _chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces
        ]
    events.append(_chunk({}, "tool_calls" if tool_calls else "stop"))
    if usage is not None:
        events.append(
            sse_event(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": "gpt-test",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": usage[0],
                        "completion_tokens": usage[1],
                        "total_tokens": sum(usage),
                    },
                }
            )
        )
    events.append("data: [DONE]\n\n")
    return Reply(sse=events)


def error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An OpenAI error body: `{"error": {"message", "type", "param", "code"}}`."""
    return Reply(
        status=status,
        json={"error": {"message": message, "type": type, "param": None, "code": code}},
        headers=headers or {},
    )


def arguments(**kwargs: Any) -> str:
    return json.dumps(kwargs)
