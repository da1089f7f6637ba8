"""Anthropic Messages API: `Claude`.

The Messages API differs from Chat Completions in ways the mapping must respect: the
system prompt is a top-level field, tool results are `tool_result` blocks inside a *user*
message, consecutive messages of one role must be merged, and `max_tokens` is required.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from statewise.exceptions import (
    MalformedResponseError,
    MissingDependencyError,
    ModelAuthenticationError,
)
from statewise.models._assemble import StreamAssembler
from statewise.models._errors import SdkErrors
from statewise.models._retry import RetryPolicy
from statewise.models._sdk import SdkModel
from statewise.models.messages import (
    Message,
    ModelResponse,
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
    Extra keyword arguments are request settings (`max_tokens` defaults to 4096).
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
        settings = {"max_tokens": DEFAULT_MAX_TOKENS, **self.settings, **info.settings}
        kwargs = self._request_kwargs(create, settings)
        system, wire_messages = map_messages(messages)
        kwargs.update(model=self.id, messages=wire_messages, timeout=self.timeout)
        if system:
            kwargs["system"] = system
        if info.tools:
            kwargs["tools"] = map_tools(info.tools)
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
        async def attempt() -> Any:
            kwargs = self._kwargs(messages, info)
            kwargs["stream"] = True
            return await self.client.messages.create(**kwargs)

        stream = await self._call(attempt)
        assembler = StreamAssembler()
        calls: dict[int, int] = {}  # content block index -> tool call index
        input_tokens = output_tokens = 0
        model_name: str | None = None
        try:
            async for event in self._stream(stream):
                kind = event.type
                if kind == "message_start":
                    model_name = event.message.model
                    input_tokens = _input_tokens(event.message.usage.model_dump())
                    output_tokens = int(event.message.usage.output_tokens or 0)
                elif kind == "content_block_start" and event.content_block.type == "tool_use":
                    block = event.content_block
                    calls[event.index] = len(calls)
                    yield assembler.add(
                        ToolCallDelta(index=calls[event.index], id=block.id, name=block.name)
                    )
                elif kind == "content_block_start" and event.content_block.type == "text":
                    if event.content_block.text:
                        yield assembler.add(TextDelta(content=event.content_block.text))
                elif kind == "content_block_delta" and event.delta.type == "text_delta":
                    yield assembler.add(TextDelta(content=event.delta.text))
                elif kind == "content_block_delta" and event.delta.type == "input_json_delta":
                    yield assembler.add(
                        ToolCallDelta(
                            index=calls[event.index], arguments_delta=event.delta.partial_json
                        )
                    )
                elif kind == "message_delta":  # usage here is cumulative
                    delta_usage = event.usage.model_dump()
                    output_tokens = int(delta_usage.get("output_tokens") or output_tokens)
                    input_tokens = _input_tokens(delta_usage) or input_tokens
        finally:
            await stream.close()
        response = assembler.response()
        response.usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1)
        response.model_name = model_name or self.id
        yield response


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
            blocks: list[dict[str, Any]] = []
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
        for block in data["content"]:
            if block["type"] == "text":
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
