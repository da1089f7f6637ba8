"""Bedrock Converse wire shapes: the JSON answer, and ConverseStream's AWS event stream.

An event-stream message is binary: a prelude (total length, headers length, CRC32 of the
two), headers (`:event-type`, `:content-type`, `:message-type`, each a string), the JSON
payload, and a CRC32 of everything before it. boto3 checks both checksums, so these are
the real bytes. A text block streams as deltas with no `contentBlockStart` (as Bedrock
sends it; a tool block starts with its id and name).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from tests.models.fakes.server import Reply

CONTENT_TYPE = "application/vnd.amazon.eventstream"


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack("!B", len(raw_name))
        + raw_name
        + struct.pack("!BH", 7, len(raw_value))  # 7: string
        + raw_value
    )


def message(headers: dict[str, str], payload: Any) -> bytes:
    """One event-stream message."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    body = json.dumps(payload).encode()
    prelude = struct.pack("!II", 12 + len(head) + len(body) + 4, len(head))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    data = prelude + head + body
    return data + struct.pack("!I", zlib.crc32(data) & 0xFFFFFFFF)


def event(kind: str, payload: dict[str, Any]) -> bytes:
    return message(
        {":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
        payload,
    )


def exception(kind: str, text: str) -> bytes:
    """An error inside the stream (`throttlingException`, `validationException`, ...)."""
    return message(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        {"message": text},
    )


def stream(
    blocks: list[tuple[str, Any]],
    *,
    input_tokens: int = 21,
    output_tokens: int = 8,
    stop: str | None = None,
    end: bool = True,
    cut: bool = False,
    after: list[bytes] | None = None,
) -> Reply:
    """A ConverseStream answer. `blocks` are `("text", [pieces])`,
    `("tool", (id, name, [input pieces]))` or `("reasoning", ([pieces], signature))`.
    Without `end` it stops after the blocks (no messageStop, no metadata); `after` is
    sent after the blocks (an exception event, say); `cut` drops the connection."""
    events = [event("messageStart", {"role": "assistant"})]
    for index, (kind, spec) in enumerate(blocks):
        if kind == "text":
            deltas = [{"text": piece} for piece in spec]
        elif kind == "reasoning":
            pieces, signature = spec
            deltas = [{"reasoningContent": {"text": piece}} for piece in pieces]
            deltas.append({"reasoningContent": {"signature": signature}})
        else:
            call_id, name, pieces = spec
            start = {"toolUse": {"toolUseId": call_id, "name": name}}
            events.append(event("contentBlockStart", {"start": start, "contentBlockIndex": index}))
            deltas = [{"toolUse": {"input": piece}} for piece in pieces]
        events += [
            event("contentBlockDelta", {"delta": delta, "contentBlockIndex": index})
            for delta in deltas
        ]
        events.append(event("contentBlockStop", {"contentBlockIndex": index}))
    events += after or []
    if end:
        has_tool = any(kind == "tool" for kind, _ in blocks)
        events.append(
            event("messageStop", {"stopReason": stop or ("tool_use" if has_tool else "end_turn")})
        )
        usage = {
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens,
        }
        events.append(event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}))
    return Reply(sse=events, cut=cut, headers={"Content-Type": CONTENT_TYPE})


def converse(
    content: list[dict[str, Any]], *, input_tokens: int = 21, output_tokens: int = 8
) -> Reply:
    """A whole Converse answer; `content` holds `{"text"}`, `{"toolUse"}` and
    `{"reasoningContent"}` blocks."""
    has_tool = any("toolUse" in block for block in content)
    return Reply(
        json={
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if has_tool else "end_turn",
            "usage": {
                "inputTokens": input_tokens,
                "outputTokens": output_tokens,
                "totalTokens": input_tokens + output_tokens,
            },
            "metrics": {"latencyMs": 5},
        }
    )


def error(status: int, code: str, text: str, *, headers: dict[str, str] | None = None) -> Reply:
    """An AWS JSON error: the code in `x-amzn-ErrorType`, the words in `message`."""
    return Reply(
        status=status,
        json={"message": text},
        headers={"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/", **(headers or {})},
    )
