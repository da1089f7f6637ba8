"""Helpers shared by the offline models: token estimates and fake streaming.

Offline models report usage so that run metrics look like real runs, and stream in
several pieces so that streaming consumers are exercised the way a provider would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from statewise.models.messages import (
    Message,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from statewise.state.jsontext import JsonText

_json = JsonText()  # `json.dumps` as it is, without building an encoder per call


def estimate_tokens(text: str | None) -> int:
    """A rough token count: about four characters a token, at least one for any text."""
    if not text:
        return 0
    return max(1, (len(text) + 3) // 4)


def estimate_usage(messages: list[Message], response: ModelResponse) -> Usage:
    """Usage of one request, estimated from the length of what went in and came out.

    Plain loops: every request of a run measures the whole conversation again, and the
    generator expressions this replaced were a visible part of a small offline run."""
    prompt = 0
    for m in messages:
        if m.content:
            prompt += (len(m.content) + 3) // 4  # (at least one: the text is not empty)
        if m.tool_calls:
            prompt += _calls_tokens(m.tool_calls)
    output = (len(response.content) + 3) // 4 if response.content else 0
    if response.tool_calls:
        output += _calls_tokens(response.tool_calls)
    return Usage(input_tokens=prompt, output_tokens=output, requests=1)


def _calls_tokens(calls: list[ToolCall]) -> int:
    # Each call's JSON arguments and its name (never empty) count as text of their own.
    tokens = 0
    for call in calls:
        tokens += (len(_json.dumps(call.arguments)) + 3) // 4 + (len(call.name) + 3) // 4
    return tokens


def word_chunks(text: str) -> list[str]:
    """Split text into word-sized pieces that join back to exactly `text`."""
    return re.findall(r"\s*\S+\s*|\s+", text)


def response_chunks(response: ModelResponse) -> Iterator[TextDelta | ToolCallDelta]:
    """The deltas a streaming provider would have sent for `response`."""
    for piece in word_chunks(response.content or ""):
        yield TextDelta(content=piece)
    for index, call in enumerate(response.tool_calls):
        yield ToolCallDelta(
            index=index, id=call.id, name=call.name, arguments_delta=json.dumps(call.arguments)
        )
