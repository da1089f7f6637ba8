"""Anthropic Messages wire shapes (`message`, and the streaming events)."""

from __future__ import annotations

from typing import Any

from tests.models.fakes.server import Reply, sse_event


def message(
    content: list[dict[str, Any]],
    *,
    model: str = "claude-test",
    input_tokens: int = 20,
    output_tokens: int = 9,
    cache_read: int = 0,
) -> Reply:
    """A complete `message`; `content` is a list of text/tool_use blocks."""
    stop = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
    return Reply(
        json={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cache_read,
            },
        }
    )


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def thinking(text: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": signature}


def tool_use(id: str, name: str, input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def stream(
    blocks: list[tuple[str, Any]],
    *,
    input_tokens: int = 25,
    output_tokens: int = 15,
    error: dict[str, Any] | None = None,
) -> Reply:
    """A streamed message. `blocks` are `("text", [pieces])`,
    `("tool_use", (id, name, [partial_json pieces]))` or `("thinking", ([pieces], signature))`. A `ping` is sent after the first
    block starts, as the API does. With `error`, an `error` event ends the stream early."""
    events = [
        sse_event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-test",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
            "message_start",
        )
    ]
    for index, (kind, spec) in enumerate(blocks):
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in spec]
        elif kind == "thinking":
            pieces, signature = spec
            start = {"type": "thinking", "thinking": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces]
            deltas.append({"type": "signature_delta", "signature": signature})
        else:
            call_id, name, pieces = spec
            start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        events.append(
            sse_event(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        if index == 0:
            events.append(sse_event({"type": "ping"}, "ping"))
        events += [
            sse_event(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
            for delta in deltas
        ]
        if error is not None:
            events.append(sse_event({"type": "error", "error": error}, "error"))
            return Reply(sse=events)
        events.append(
            sse_event({"type": "content_block_stop", "index": index}, "content_block_stop")
        )
    has_tool = any(kind == "tool_use" for kind, _ in blocks)
    events.append(
        sse_event(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if has_tool else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": output_tokens},
            },
            "message_delta",
        )
    )
    events.append(sse_event({"type": "message_stop"}, "message_stop"))
    return Reply(sse=events)


def error(status: int, type: str, message: str, *, headers: dict[str, str] | None = None) -> Reply:
    """An Anthropic error body: `{"type": "error", "error": {"type", "message"}}`."""
    return Reply(
        status=status,
        json={"type": "error", "error": {"type": type, "message": message}},
        headers=headers or {},
    )
