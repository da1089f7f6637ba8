"""OpenAI Responses API: `OpenAIResponses`.

Stateless use of the API: the whole conversation is sent as `input` items each time (no
`previous_response_id`), because statewise owns the history. System messages become
`instructions`; tool calls and results are `function_call` / `function_call_output` items
joined by `call_id`, which is what `ToolCall.id` holds.
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
    ModelError,
)
from statewise.models._assemble import StreamAssembler, parse_arguments
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
from statewise.models.openai_chat import OPENAI_ERRORS, openai_error_event

try:
    import openai
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("openai", "openai") from _exc


PROVIDER = "openai-responses"


class OpenAIResponses(SdkModel["openai.AsyncOpenAI"]):
    """A model behind the Responses API (`POST {base_url}/responses`).

    Same keys and endpoints as `OpenAIChat`. Function tools are sent with `strict: false`
    (the API defaults to strict schemas, which most tool schemas do not satisfy). The
    generic `max_tokens` setting is sent as `max_output_tokens`. `reasoning` output items
    are kept in the history and sent back before the turn's other items; to keep
    reasoning across steps without server-side storage, pass `store=False` and
    `include=["reasoning.encrypted_content"]`.
    """

    provider = "openai-responses"
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

    def _make_client(self) -> openai.AsyncOpenAI:
        if not self.api_key:
            raise ModelAuthenticationError(
                f"{self.provider} model {self.id!r}: no API key; set OPENAI_API_KEY or pass api_key="
            )
        return openai.AsyncOpenAI(
            api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout
        )

    def _kwargs(self, messages: list[Message], info: RequestInfo) -> dict[str, Any]:
        settings = self._settings(info)
        if "max_tokens" in settings:
            settings.setdefault("max_output_tokens", settings.pop("max_tokens"))
        kwargs = self._request_kwargs(self.client.responses.create, settings)
        instructions, items = map_input(messages)
        kwargs.update(model=self.id, input=items, timeout=self.timeout)
        if instructions:
            kwargs["instructions"] = instructions
        if info.tools:
            kwargs["tools"] = map_tools(info.tools)
        if info.output is not None:
            fmt: dict[str, Any] = {
                "type": "json_schema",
                "name": info.output.name,
                "schema": info.output.json_schema,
                "strict": info.output.strict,
            }
            if info.output.description:
                fmt["description"] = info.output.description
            kwargs["text"] = {"format": fmt}
        return kwargs

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        async def attempt() -> Any:
            raw = await self.client.responses.with_raw_response.create(
                **self._kwargs(messages, info)
            )
            return json.loads(raw.http_response.content)

        return parse_response(await self._call(attempt), model=self.id)

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        def open_stream() -> Any:
            args = {**self._kwargs(messages, info), "stream": True}
            return self.client.responses.with_streaming_response.create(**args)

        prefix = f"{self.provider} model {self.id!r}"
        async for chunk in self._stream_request(
            open_stream, lambda: ResponsesStream(prefix, self.id)
        ):
            yield chunk


class ResponsesStream(TypedEventStream):
    """Typed events up to `response.completed` (or `response.incomplete`, a complete answer
    cut short by a limit). `response.failed` and `error` raise `StreamErrorEvent`."""

    terminator = "response.completed"

    def __init__(self, prefix: str, model: str) -> None:
        self.prefix = prefix
        self.model = model
        self.assembler = StreamAssembler()
        self.calls: dict[str, int] = {}  # function_call item id -> tool call index
        self.reasoning: list[Reasoning] = []
        self.final: dict[str, Any] = {}

    def _text_delta(self, data: dict[str, Any]) -> Iterator[Delta]:
        yield self.assembler.add(TextDelta(content=str(data["delta"])))

    def _item_added(self, data: dict[str, Any]) -> Iterator[Delta]:
        item = data["item"]
        if item["type"] != "function_call":
            return
        key = item.get("id") or item["call_id"]
        self.calls[key] = len(self.calls)
        yield self.assembler.add(
            ToolCallDelta(
                index=self.calls[key],
                id=item["call_id"],
                name=item["name"],
                arguments_delta=item.get("arguments") or "",
            )
        )

    def _arguments_delta(self, data: dict[str, Any]) -> Iterator[Delta]:
        yield self.assembler.add(
            ToolCallDelta(index=self.calls[data["item_id"]], arguments_delta=data["delta"])
        )

    def _item_done(self, data: dict[str, Any]) -> None:
        if data["item"]["type"] == "reasoning":
            self.reasoning.append(reasoning_item(data["item"]))

    def _completed(self, data: dict[str, Any]) -> None:
        self.final = data.get("response") or {}
        self.done = True

    def _failed(self, data: dict[str, Any]) -> None:
        error = (data.get("response") or {}).get("error") or {}
        raise openai_error_event({"error": error})

    def _error(self, data: dict[str, Any]) -> None:
        raise openai_error_event(data)

    handlers: ClassVar[Mapping[str, EventHandler]] = {
        "response.output_text.delta": _text_delta,
        "response.output_item.added": _item_added,
        "response.function_call_arguments.delta": _arguments_delta,
        "response.output_item.done": _item_done,
        "response.completed": _completed,
        "response.incomplete": _completed,  # a complete answer cut short by a limit
        "response.failed": _failed,
        "error": _error,
    }

    def response(self) -> ModelResponse:
        response = self.assembler.response()
        response.usage = _usage(self.final.get("usage") or {})
        response.model_name = self.final.get("model") or self.model
        response.reasoning = self.reasoning
        return response


def map_input(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """`(instructions, input items)` for the Responses API."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                instructions.append(message.content)
        elif message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content or "",
                }
            )
        elif message.role == "assistant":
            items += [dict(part.data) for part in message.reasoning if part.provider == PROVIDER]
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            items += [
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": json.dumps(call.arguments),
                }
                for call in message.tool_calls
            ]
        else:
            items.append({"role": "user", "content": message.content or ""})
    return "\n\n".join(instructions), items


def map_tools(tools: list[ToolDefinition]) -> list[dict[str, Any]]:
    result = []
    for tool in tools:
        item: dict[str, Any] = {
            "type": "function",
            "name": tool.name,
            "parameters": tool.parameters,
            "strict": False,
        }
        if tool.description:
            item["description"] = tool.description
        result.append(item)
    return result


def parse_response(data: Any, *, model: str) -> ModelResponse:
    """A Responses API `response` object as a `ModelResponse`."""
    try:
        if data.get("status") == "failed":
            error = data.get("error") or {}
            raise ModelError(
                f"openai-responses model {model!r}: the response failed: {error.get('message')}"
            )
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[Reasoning] = []
        for item in data["output"]:
            if item["type"] == "reasoning":
                reasoning.append(reasoning_item(item))
            elif item["type"] == "message":
                texts += [
                    str(part["text"]) for part in item["content"] if part["type"] == "output_text"
                ]
            elif item["type"] == "function_call":
                arguments, error = parse_arguments(item.get("arguments"))
                calls.append(
                    ToolCall(str(item["name"]), arguments, item["call_id"], arguments_error=error)
                )
        result = ModelResponse(
            content="".join(texts) or None,
            tool_calls=calls,
            usage=_usage(data.get("usage") or {}),
            model_name=data.get("model") or model,
            reasoning=reasoning,
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MalformedResponseError(
            f"openai-responses model {model!r}: unexpected response body "
            f"({type(exc).__name__}: {exc}): {json.dumps(data)[:300]}"
        ) from exc
    return result


def reasoning_item(item: dict[str, Any]) -> Reasoning:
    """A `reasoning` output item, kept whole (id, summary, encrypted content) to send back."""
    summary = item.get("summary") or []
    text = "\n\n".join(str(p.get("text", "")) for p in summary if isinstance(p, dict))
    return Reasoning(provider=PROVIDER, data=dict(item), text=text)


def _usage(data: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(data.get("input_tokens") or 0),
        output_tokens=int(data.get("output_tokens") or 0),
        requests=1,
    )
