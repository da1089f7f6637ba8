"""OpenAI Chat Completions, and every server that speaks it (Ollama, vLLM, LM Studio,
llama.cpp): `OpenAIChat`.

Non-streaming answers are read as raw JSON and parsed here, so a body that is not what the
API documents becomes a `MalformedResponseError` instead of an attribute error deep inside.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Literal

from statewise.exceptions import MalformedResponseError, MissingDependencyError
from statewise.models._assemble import StreamAssembler, parse_arguments
from statewise.models._errors import (
    FINAL_CODES,
    OPENAI_ERROR_STATUS,
    SdkErrors,
    StreamErrorEvent,
    error_code,
    status_for,
)
from statewise.models._retry import RetryPolicy
from statewise.models._sdk import SdkModel
from statewise.models._sse import SseEvent, StreamReader, parse_json
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
        structured_output: Literal["json_schema", "tool"] = "json_schema",
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
        # How a typed answer is asked for: `response_format` with a JSON Schema (OpenAI,
        # and servers that support it), or a final-answer tool for servers that do not.
        self.structured_output = structured_output

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
        kwargs = self._request_kwargs(create, self._settings(info))
        kwargs.update(model=self.id, messages=map_messages(messages), timeout=self.timeout)
        tools = list(info.tools)
        if info.output is not None and self.structured_output == "json_schema":
            schema: dict[str, Any] = {"name": info.output.name, "schema": info.output.json_schema}
            if info.output.strict:
                schema["strict"] = True
            if info.output.description:
                schema["description"] = info.output.description
            kwargs["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif info.output is not None:
            tools.append(info.output.final_answer_tool())
            kwargs["tool_choice"] = "required"
        if tools:
            kwargs["tools"] = map_tools(tools)
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

        def open_stream() -> Any:
            args = {**self._kwargs(messages, info), "stream": True}
            if self.stream_usage:
                args["stream_options"] = {"include_usage": True}
            return self.client.chat.completions.with_streaming_response.create(**args)

        prefix = f"{self.provider} model {self.id!r}"
        async for chunk in self._stream_request(open_stream, lambda: ChatStream(prefix, self.id)):
            yield chunk


class ChatStream(StreamReader):
    """`chat.completion.chunk` events up to `data: [DONE]`. An event carrying `error` (as
    OpenAI, vLLM and llama.cpp send mid-stream) raises `StreamErrorEvent`."""

    terminator = "data: [DONE]"

    def __init__(self, prefix: str, model: str) -> None:
        self.prefix = prefix
        self.model = model
        self.assembler = StreamAssembler()
        self.usage = Usage(requests=1)
        self.model_name: str | None = None

    def feed(self, event: SseEvent) -> Iterable[TextDelta | ToolCallDelta]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        data = parse_json(event, self.prefix)
        if not isinstance(data, dict):
            raise MalformedResponseError(f"{self.prefix}: a stream event is not an object")
        if data.get("error") is not None or event.event == "error":
            raise openai_error_event(data)
        try:
            return list(self._deltas(data))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise MalformedResponseError(
                f"{self.prefix}: unexpected chat.completion.chunk ({type(exc).__name__}: "
                f"{exc}): {event.data[:300]}"
            ) from exc

    def _deltas(self, data: dict[str, Any]) -> Iterator[TextDelta | ToolCallDelta]:
        self.model_name = self.model_name or data.get("model")
        if data.get("usage"):
            self.usage = _usage(data["usage"])
        for choice in (data.get("choices") or [])[:1]:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield self.assembler.add(TextDelta(content=str(delta["content"])))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                yield self.assembler.add(
                    ToolCallDelta(
                        index=int(call.get("index") or 0),
                        id=call.get("id"),
                        name=function.get("name"),
                        arguments_delta=function.get("arguments") or "",
                    )
                )

    def response(self) -> ModelResponse:
        response = self.assembler.response()
        response.usage = self.usage
        response.model_name = self.model_name or self.model
        return response


def openai_error_event(data: dict[str, Any]) -> StreamErrorEvent:
    """An OpenAI-style error inside a stream: `{"error": {message, type, code}}`, or the
    Responses API's `{"type": "error", "code", "message"}`. vLLM puts the status in `code`."""
    inner = data.get("error")
    error: dict[str, Any] = inner if isinstance(inner, dict) else data
    code, kind = error.get("code"), error.get("type")
    if isinstance(code, int) or (isinstance(code, str) and code.isdigit()):
        status = int(code)
    else:
        status = OPENAI_ERROR_STATUS.get(str(code), status_for(kind, OPENAI_ERROR_STATUS))
    message = str(error.get("message") or json.dumps(error)[:300])
    named = code if isinstance(code, str) and not code.isdigit() else kind
    return StreamErrorEvent(
        status,
        data,
        f"{named}: {message}" if named else message,
        retryable=False if code in FINAL_CODES else None,
    )


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
            # Never `"content": null`: OpenAI accepts it next to tool calls, but llama.cpp's
            # server (and others) answer 500; an empty string is accepted everywhere.
            item: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                    for call in message.tool_calls
                ]
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
