"""Anthropic Messages API: `Claude`.

The Messages API differs from Chat Completions in ways the mapping must respect: the
system prompt is a top-level field, tool results are `tool_result` blocks inside a *user*
message, consecutive messages of one role must be merged, and `max_tokens` is required.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, ClassVar

from statewise.exceptions import (
    MalformedResponseError,
    MissingDependencyError,
    ModelAuthenticationError,
)
from statewise.models._assemble import StreamAssembler
from statewise.models._errors import ANTHROPIC_ERROR_STATUS, SdkErrors, StreamErrorEvent, status_for
from statewise.models._retry import RetryPolicy
from statewise.models._sdk import SdkModel
from statewise.models._sse import Delta, EventHandler, TypedEventStream
from statewise.models.messages import (
    Message,
    ModelResponse,
    Reasoning,
    RequestInfo,
    StreamChunk,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    Usage,
)

try:
    import anthropic
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("anthropic", "anthropic") from _exc

DEFAULT_MAX_TOKENS = 4096
PROVIDER = "anthropic"


def _anthropic_context_length(status: int, body: Any, message: str) -> bool:
    lowered = message.lower()
    return status in (400, 413) and ("prompt is too long" in lowered or "context window" in lowered)


ANTHROPIC_ERRORS = SdkErrors(
    status=anthropic.APIStatusError,
    connection=anthropic.APIConnectionError,
    validation=anthropic.APIResponseValidationError,
    api=anthropic.APIError,
    is_context_length=_anthropic_context_length,
)


class Claude(SdkModel["anthropic.AsyncAnthropic"]):
    """A model behind the Messages API (`POST {base_url}/v1/messages`).

    `api_key` and `base_url` default to `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL`.
    Extra keyword arguments are request settings (`max_tokens` defaults to 4096;
    `thinking={"type": "enabled", "budget_tokens": ...}` turns on extended thinking, whose
    blocks are kept in the history and sent back with their signatures).
    """

    provider = "anthropic"
    sdk_errors = ANTHROPIC_ERRORS

    def __init__(
        self,
        id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(
            id=id,
            api_key=api_key or os.environ.get("ANTHROPIC_API_KEY"),
            timeout=timeout,
            retry=retry,
            max_retries=max_retries,
            client=client,
            settings=settings,
        )
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None

    def _make_client(self) -> anthropic.AsyncAnthropic:
        if not self.api_key:
            raise ModelAuthenticationError(
                f"anthropic model {self.id!r}: no API key; set ANTHROPIC_API_KEY or pass api_key="
            )
        return anthropic.AsyncAnthropic(
            api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout
        )

    def _kwargs(self, messages: list[Message], info: RequestInfo) -> dict[str, Any]:
        create = self.client.messages.create
        settings = {"max_tokens": DEFAULT_MAX_TOKENS, **self._settings(info)}
        kwargs = self._request_kwargs(create, settings)
        system, wire_messages = map_messages(messages)
        kwargs.update(model=self.id, messages=wire_messages, timeout=self.timeout)
        if system:
            kwargs["system"] = system
        tools = list(info.tools)
        if info.output is not None:
            # The answer as a tool: with `any`, every turn calls a tool, the last one the
            # final-answer tool whose input is the typed answer.
            tools.append(info.output.final_answer_tool())
            kwargs["tool_choice"] = {"type": "any"}
        if tools:
            kwargs["tools"] = map_tools(tools)
        return kwargs

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        async def attempt() -> Any:
            raw = await self.client.messages.with_raw_response.create(
                **self._kwargs(messages, info)
            )
            return json.loads(raw.http_response.content)

        data = await self._call(attempt)
        return parse_message(data, model=self.id)

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        def open_stream() -> Any:
            args = {**self._kwargs(messages, info), "stream": True}
            return self.client.messages.with_streaming_response.create(**args)

        prefix = f"anthropic model {self.id!r}"
        async for chunk in self._stream_request(
            open_stream, lambda: MessagesStream(prefix, self.id)
        ):
            yield chunk


class MessagesStream(TypedEventStream):
    """Messages API events up to `message_stop`. Thinking blocks are collected whole
    (text and signature deltas) to be sent back; an `error` event raises
    `StreamErrorEvent` with the status its type has as a response."""

    terminator = "message_stop"

    def __init__(self, prefix: str, model: str) -> None:
        self.prefix = prefix
        self.model = model
        self.assembler = StreamAssembler()
        self.calls: dict[int, int] = {}  # content block index -> tool call index
        self.thinking: dict[int, dict[str, Any]] = {}  # content block index -> block
        self.input_tokens = self.output_tokens = 0
        self.model_name: str | None = None

    def _message_start(self, data: dict[str, Any]) -> None:
        message = data["message"]
        self.model_name = message.get("model")
        usage = message.get("usage") or {}
        self.input_tokens = _input_tokens(usage)
        self.output_tokens = int(usage.get("output_tokens") or 0)

    def _block_start(self, data: dict[str, Any]) -> Iterator[Delta]:
        index, block = int(data["index"]), data["content_block"]
        if block["type"] == "tool_use":
            self.calls[index] = len(self.calls)
            yield self.assembler.add(
                ToolCallDelta(index=self.calls[index], id=block["id"], name=block["name"])
            )
        elif block["type"] == "text" and block.get("text"):
            yield self.assembler.add(TextDelta(content=str(block["text"])))
        elif block["type"] in ("thinking", "redacted_thinking"):
            self.thinking[index] = dict(block)

    def _block_delta(self, data: dict[str, Any]) -> Iterator[Delta]:
        index, delta = int(data["index"]), data["delta"]
        if delta["type"] == "text_delta":
            yield self.assembler.add(TextDelta(content=str(delta["text"])))
        elif delta["type"] == "input_json_delta":
            yield self.assembler.add(
                ToolCallDelta(index=self.calls[index], arguments_delta=delta["partial_json"])
            )
        elif delta["type"] == "thinking_delta":
            block = self.thinking[index]
            block["thinking"] = block.get("thinking", "") + str(delta["thinking"])
        elif delta["type"] == "signature_delta":
            self.thinking[index]["signature"] = str(delta["signature"])

    def _message_delta(self, data: dict[str, Any]) -> None:
        usage = data.get("usage") or {}  # cumulative
        self.output_tokens = int(usage.get("output_tokens") or self.output_tokens)
        self.input_tokens = _input_tokens(usage) or self.input_tokens

    def _message_stop(self, data: dict[str, Any]) -> None:
        self.done = True

    def _error(self, data: dict[str, Any]) -> None:
        error = data.get("error") or {}
        kind = error.get("type")
        message = str(error.get("message") or json.dumps(error)[:300])
        raise StreamErrorEvent(
            status_for(kind, ANTHROPIC_ERROR_STATUS),
            data,
            f"{kind}: {message}" if kind else message,
        )

    handlers: ClassVar[Mapping[str, EventHandler]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
        "error": _error,
    }

    def response(self) -> ModelResponse:
        response = self.assembler.response()
        response.usage = Usage(
            input_tokens=self.input_tokens, output_tokens=self.output_tokens, requests=1
        )
        response.model_name = self.model_name or self.model
        response.reasoning = [thinking_block(self.thinking[i]) for i in sorted(self.thinking)]
        return response


def thinking_block(block: dict[str, Any]) -> Reasoning:
    """A `thinking` or `redacted_thinking` block, kept whole (signature or data included)."""
    return Reasoning(provider=PROVIDER, data=block, text=str(block.get("thinking") or ""))


def map_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """`(system, messages)` in Messages API form; same-role neighbours are merged."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
        elif message.role == "user":
            add("user", [{"type": "text", "text": message.content or ""}])
        elif message.role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.tool_call_id,
                        "content": message.content or "",
                    }
                ],
            )
        else:
            # Thinking blocks go back first, signature and all, as the API requires for a
            # turn that called tools (and accepts for any other).
            blocks: list[dict[str, Any]] = [
                dict(part.data) for part in message.reasoning if part.provider == PROVIDER
            ]
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            ]
            add("assistant", blocks or [{"type": "text", "text": ""}])
    return "\n\n".join(system), out


def map_tools(tools: list[ToolDefinition]) -> list[dict[str, Any]]:
    result = []
    for tool in tools:
        item: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
        if tool.description:
            item["description"] = tool.description
        result.append(item)
    return result


def parse_message(data: Any, *, model: str) -> ModelResponse:
    """A Messages API `message` object as a `ModelResponse`."""
    try:
        if data.get("type") != "message":
            raise TypeError(f"type is {data.get('type')!r}, not 'message'")
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[Reasoning] = []
        for block in data["content"]:
            if block["type"] in ("thinking", "redacted_thinking"):
                reasoning.append(thinking_block(dict(block)))
            elif block["type"] == "text":
                texts.append(str(block["text"]))
            elif block["type"] == "tool_use":
                arguments = block.get("input")
                error = None
                if not isinstance(arguments, dict):
                    error = f"tool input must be a JSON object, got {json.dumps(arguments)}"
                    arguments = {}
                calls.append(ToolCall(block["name"], arguments, block["id"], arguments_error=error))
        usage = data.get("usage") or {}
        result = ModelResponse(
            content="".join(texts) or None,
            tool_calls=calls,
            usage=Usage(
                input_tokens=_input_tokens(usage),
                output_tokens=int(usage.get("output_tokens") or 0),
                requests=1,
            ),
            model_name=data.get("model") or model,
            reasoning=reasoning,
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MalformedResponseError(
            f"anthropic model {model!r}: unexpected message body "
            f"({type(exc).__name__}: {exc}): {json.dumps(data)[:300]}"
        ) from exc
    return result


def _input_tokens(usage: dict[str, Any]) -> int:
    """Input tokens including prompt-cache reads and writes, which Anthropic counts apart."""
    return sum(
        int(usage.get(key) or 0)
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
