"""Record/replay cassettes: run against a real model once, then offline forever.

A cassette is a JSON Lines file, one exchange per line:
`{"request": {"messages": [...], "tools": [...]}, "response": {...}}`. JSON only, so a
cassette is readable, diffable, and loading one never runs code. Only the request's
messages and tool definitions are recorded (run ids and step numbers change every run).
Streams are recorded as their final response and replayed as word-sized deltas.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from statewise.exceptions import (
    CassetteExhaustedError,
    CassetteMismatchError,
    ConfigurationError,
)
from statewise.models._offline import response_chunks
from statewise.models.base import Model
from statewise.models.messages import (
    Message,
    ModelResponse,
    Reasoning,
    RequestInfo,
    StreamChunk,
    ToolCall,
    Usage,
)


def request_to_dict(messages: list[Message], info: RequestInfo) -> dict[str, Any]:
    return {
        "messages": [m.to_dict() for m in messages],
        "tools": [asdict(t) for t in info.tools],
    }


def response_to_dict(response: ModelResponse) -> dict[str, Any]:
    data = {
        "content": response.content,
        "tool_calls": [c.to_dict() for c in response.tool_calls],
        "usage": response.usage.to_dict(),
        "model_name": response.model_name,
    }
    if response.reasoning:
        data["reasoning"] = [r.to_dict() for r in response.reasoning]
    return data


def response_from_dict(data: dict[str, Any]) -> ModelResponse:
    usage = data.get("usage") or {}
    return ModelResponse(
        content=data.get("content"),
        tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls") or []],
        usage=Usage(
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            requests=int(usage.get("requests", 1)),
        ),
        model_name=data.get("model_name"),
        reasoning=[Reasoning.from_dict(r) for r in data.get("reasoning") or []],
    )


class RecordingModel(Model):
    """Wraps a model and appends every exchange it makes to `cassette_path`.

    The file is started afresh on the first exchange unless `append=True`. Each line is
    written and flushed as soon as the response is complete, so a crashed run keeps what
    it recorded.
    """

    provider = "recording"

    def __init__(self, inner: Model, cassette_path: str | Path, *, append: bool = False) -> None:
        self.inner = inner
        self.path = Path(cassette_path)
        self.id = inner.id
        self._fresh = not append
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        response = await self.inner.request(messages, info)
        self._write(messages, info, response)
        return response

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in self.inner.request_stream(messages, info):
            if isinstance(chunk, ModelResponse):
                self._write(messages, info, chunk)
            yield chunk

    def _write(self, messages: list[Message], info: RequestInfo, response: ModelResponse) -> None:
        line = json.dumps(
            {"request": request_to_dict(messages, info), "response": response_to_dict(response)},
            ensure_ascii=False,
        )
        with self._lock:
            mode = "w" if self._fresh else "a"
            self._fresh = False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open(mode, encoding="utf-8") as file:
                file.write(line + "\n")


class ReplayModel(Model):
    """Answers from a cassette, in recorded order, with no network.

    With `strict=True` (the default) each request must equal the recorded one (messages
    and tool definitions); a difference raises `CassetteMismatchError` showing a diff, so a
    changed prompt cannot silently replay stale answers. Running past the last exchange
    raises `CassetteExhaustedError`. `remaining` says how many exchanges are left.
    """

    provider = "replay"

    def __init__(self, cassette_path: str | Path, *, strict: bool = True) -> None:
        self.path = Path(cassette_path)
        self.strict = strict
        self.id = self.path.name
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigurationError(f"cannot read cassette {str(self.path)!r}: {exc}") from exc
        self._exchanges: list[dict[str, Any]] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                exchange = json.loads(line)
            except ValueError as exc:
                exchange = {"error": str(exc)}
            if not isinstance(exchange, dict) or not {"request", "response"} <= exchange.keys():
                raise ConfigurationError(
                    f"cassette {str(self.path)!r} line {number} is not a recorded exchange"
                )
            self._exchanges.append(exchange)
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._exchanges) - self._next

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        index = self._next
        if index >= len(self._exchanges):
            raise CassetteExhaustedError(
                f"cassette {str(self.path)!r} has {len(self._exchanges)} exchanges and all "
                f"were replayed; request {index + 1} was not recorded (record again?)"
            )
        exchange = self._exchanges[index]
        if self.strict:
            actual = request_to_dict(messages, info)
            if actual != exchange["request"]:
                raise CassetteMismatchError(
                    f"request {index + 1} differs from cassette {str(self.path)!r}:\n"
                    + _diff(exchange["request"], actual)
                )
        self._next += 1
        return response_from_dict(exchange["response"])

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        response = await self.request(messages, info)
        for chunk in response_chunks(response):
            yield chunk
        yield response


def _diff(recorded: Any, actual: Any, limit: int = 40) -> str:
    lines = difflib.unified_diff(
        json.dumps(recorded, indent=1, sort_keys=True).splitlines(),
        json.dumps(actual, indent=1, sort_keys=True).splitlines(),
        "recorded",
        "actual",
        lineterm="",
        n=2,
    )
    out = list(lines)
    return "\n".join(
        out[:limit] + ([f"... ({len(out) - limit} more lines)"] if len(out) > limit else [])
    )
