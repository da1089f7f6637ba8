"""OpenAI Chat Completions, and every server that speaks it (Ollama, vLLM, LM Studio,
llama.cpp): `OpenAIChat`.

Non-streaming answers are read as raw JSON and parsed here, so a body that is not what the
API documents becomes a `MalformedResponseError` instead of an attribute error deep inside.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from statewise.exceptions import MalformedResponseError, MissingDependencyError
from statewise.models._assemble import StreamAssembler, parse_arguments
from statewise.models._errors import SdkErrors, error_code
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
    import openai
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("openai", "openai") from _exc


def _openai_context_length(status: int, body: Any, message: str) -> bool:
    return error_code(body) == "context_length_exceeded" or (
        status == 400 and "maximum context length" in message
    )


OPENAI_ERRORS = SdkErrors(
    status=openai.APIStatusError,
    connection=openai.APIConnectionError,
    validation=openai.APIResponseValidationError,
    api=openai.APIError,
    is_context_length=_openai_context_length,
)


class OpenAIChat(SdkModel["openai.AsyncOpenAI"]):
    """A model behind the Chat Completions API (`POST {base_url}/chat/completions`).

    `api_key` and `base_url` default to `OPENAI_API_KEY` and `OPENAI_BASE_URL`. Extra
    keyword arguments are request settings (`temperature=0`, `max_tokens=...`); settings in
    `RequestInfo.settings` override them per request, and ones the SDK does not know are
    sent in the body as they are. `stream_usage` asks for token usage in streams
    (`stream_options.include_usage`); turn it off for servers that reject it.
    """

    provider = "openai"
    sdk_errors = OPENAI_ERRORS

    def __init__(
        self,
        id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        client: openai.AsyncOpenAI | None = None,
        provider: str = "openai",
        stream_usage: bool = True,
        **settings: Any,
    ) -> None:
        super().__init__(
            id=id,
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
            timeout=timeout,
            retry=retry,
            max_retries=max_retries,
            client=client,
            settings=settings,
        )
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.provider = provider
        self.stream_usage = stream_usage

    def _make_client(self) -> openai.AsyncOpenAI:
        if not self.api_key:
            from statewise.exceptions import ModelAuthenticationError

            raise ModelAuthenticationError(
                f"{self.provider} model {self.id!r}: no API key; set OPENAI_API_KEY or pass api_key="
            )
        return openai.AsyncOpenAI(
            api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout
        )

    def _kwargs(self, messages: list[Message], info: RequestInfo) -> dict[str, Any]:
        create = self.client.chat.completions.create
        kwargs = self._request_kwargs(create, {**self.settings, **info.settings})
        kwargs.update(model=self.id, messages=map_messages(messages), timeout=self.timeout)
        if info.tools:
            kwargs["tools"] = map_tools(info.tools)
        return kwargs

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        async def attempt() -> Any:
            raw = await self.client.chat.completions.with_raw_response.create(
                **self._kwargs(messages, info)
            )
            return json.loads(raw.http_response.content)

        data = await self._call(attempt)
        return parse_completion(data, provider=self.provider, model=self.id)

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        async def attempt() -> Any:
            kwargs = self._kwargs(messages, info)
            kwargs["stream"] = True
            if self.stream_usage:
                kwargs["stream_options"] = {"include_usage": True}
            return await self.client.chat.completions.create(**kwargs)

        stream = await self._call(attempt)
        assembler = StreamAssembler()
        usage = Usage(requests=1)
        model_name: str | None = None
        try:
            async for chunk in self._stream(stream):
                model_name = model_name or chunk.model
                if chunk.usage is not None:
                    usage = _usage(chunk.usage.model_dump())
                for choice in chunk.choices[:1]:
                    delta = choice.delta
                    if delta.content:
                        yield assembler.add(TextDelta(content=delta.content))
                    for call in delta.tool_calls or []:
                        function = call.function
                        yield assembler.add(
                            ToolCallDelta(
                                index=call.index,
                                id=call.id,
                                name=function.name if function else None,
                                arguments_delta=(function.arguments or "") if function else "",
                            )
                        )
        finally:
            await stream.close()
        response = assembler.response()
        response.usage = usage
        response.model_name = model_name or self.id
        yield response


def map_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages as Chat Completions messages."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id,
                    "content": message.content or "",
                }
            )
        elif message.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                    for call in message.tool_calls
                ]
            elif message.content is None:
                item["content"] = ""
            out.append(item)
        else:
            item = {"role": message.role, "content": message.content or ""}
            if message.name and message.role == "user":
                item["name"] = message.name
            out.append(item)
    return out


def map_tools(tools: list[ToolDefinition]) -> list[dict[str, Any]]:
    """Our tool definitions as Chat Completions `tools`."""
    result = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
        if tool.description:
            function["description"] = tool.description
        result.append({"type": "function", "function": function})
    return result


def parse_completion(data: Any, *, provider: str, model: str) -> ModelResponse:
    """A `chat.completion` JSON object as a `ModelResponse`."""
    try:
        message = data["choices"][0]["message"]
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError("message.content is not a string")
        if content is None and isinstance(message.get("refusal"), str):
            content = message["refusal"]  # a refusal is the model's answer, in words
        calls = []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            arguments, error = parse_arguments(function.get("arguments"))
            calls.append(
                ToolCall(str(function["name"]), arguments, call.get("id"), arguments_error=error)
            )
        usage = _usage(data.get("usage") or {})
        name = data.get("model")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MalformedResponseError(
            f"{provider} model {model!r}: unexpected chat.completion body "
            f"({type(exc).__name__}: {exc}): {json.dumps(data)[:300]}"
        ) from exc
    return ModelResponse(content=content, tool_calls=calls, usage=usage, model_name=name or model)


def _usage(data: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(data.get("prompt_tokens") or 0),
        output_tokens=int(data.get("completion_tokens") or 0),
        requests=1,
    )
