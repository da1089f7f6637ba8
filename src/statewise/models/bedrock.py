"""AWS Bedrock's Converse and ConverseStream APIs on `boto3`: `Bedrock`.

boto3 is synchronous, so each call runs in a worker thread (`asyncio.to_thread`), and a
stream is read one event per hop; the event loop never blocks on AWS. Credentials and
region are whatever boto3 finds (environment, profile, instance role), unless passed.
`api_key` is a Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`), sent as a bearer token.

The mapping: the system prompt is a top-level `system` list, tool results are
`toolResult` blocks in a *user* message, same-role neighbours are merged, and a model's
`reasoningContent` blocks (text and signature, or redacted bytes) are kept and sent back
first in the assistant turn, as Anthropic's models on Bedrock require in a tool loop.

A typed answer (`RequestInfo.output`): Bedrock has no native JSON mode for every model, so
the route is the one `Claude` takes: the final-answer tool beside the others, with
`toolChoice: {"any": {}}`; its input is the answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any

from statewise.exceptions import (
    ConfigurationError,
    MalformedResponseError,
    MissingDependencyError,
    ModelAuthenticationError,
    ModelError,
)
from statewise.models._assemble import StreamAssembler
from statewise.models._errors import arrived, connection_error, redact, status_error
from statewise.models._retry import Retryable, RetryPolicy, parse_retry_after, status_is_retryable
from statewise.models._sdk import SdkModel
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
    import boto3
    import botocore.config
    import botocore.eventstream
    import botocore.exceptions
    import botocore.parsers
    import botocore.session
    import botocore.tokens
    import urllib3.exceptions
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("boto3", "bedrock") from _exc

PROVIDER = "bedrock"
BEARER_ENV = "AWS_BEARER_TOKEN_BEDROCK"

# Error codes (as exceptions in a stream carry them, without a status) and their status.
ERROR_STATUS = {
    "validationexception": 400,
    "accessdeniedexception": 403,
    "unrecognizedclientexception": 403,
    "resourcenotfoundexception": 404,
    "modeltimeoutexception": 408,
    "modelerrorexception": 424,
    "modelstreamerrorexception": 424,
    "throttlingexception": 429,
    "modelnotreadyexception": 429,
    "servicequotaexceededexception": 429,
    "internalserverexception": 500,
    "serviceunavailableexception": 503,
}
_INFERENCE = {
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop_sequences": "stopSequences",
}
_REQUEST = {
    "additional_model_request_fields": "additionalModelRequestFields",
    "additionalModelRequestFields": "additionalModelRequestFields",
    "inferenceConfig": "inferenceConfig",
    "guardrailConfig": "guardrailConfig",
    "guardrail_config": "guardrailConfig",
    "performanceConfig": "performanceConfig",
    "performance_config": "performanceConfig",
    "requestMetadata": "requestMetadata",
}
_CONTEXT_WORDS = ("too long", "too many input tokens", "context length", "context window")
_TRANSPORT: tuple[type[Exception], ...] = (
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ConnectionError,
    urllib3.exceptions.HTTPError,
)


class Bedrock(SdkModel[Any]):
    """A model on Bedrock (`bedrock:<model id or inference profile>`).

    `base_url` is the endpoint URL (a VPC endpoint, a gateway, a test server); `region`,
    `profile` and the `aws_*` credentials default to what boto3 finds. `api_key` (default
    `AWS_BEARER_TOKEN_BEDROCK`) is a Bedrock API key; boto3 sends it only over HTTPS.

    Extra keyword arguments are request settings: `max_tokens`, `temperature`, `top_p`, `stop_sequences` go to
    `inferenceConfig`; `additional_model_request_fields={...}` (for example Claude's
    `{"thinking": {"type": "enabled", "budget_tokens": 1024}}`) and the Converse fields
    `guardrailConfig`, `performanceConfig`, `requestMetadata` are sent as given.
    `tool_choice` is "auto", "required" or `{"name": "<tool>"}`.
    """

    provider = PROVIDER

    def __init__(
        self,
        id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        timeout: float = 60.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        client: Any = None,
        **settings: Any,
    ) -> None:
        unknown = sorted(set(settings) - set(_INFERENCE) - set(_REQUEST) - {"tool_choice"})
        if unknown:
            raise ConfigurationError(
                f"bedrock model {id!r}: unknown settings {', '.join(unknown)} (known: "
                f"{', '.join(sorted({*_INFERENCE, *_REQUEST}))}, tool_choice)"
            )
        super().__init__(
            id=id,
            api_key=api_key or os.environ.get(BEARER_ENV),
            timeout=timeout,
            retry=retry,
            max_retries=max_retries,
            client=client,
            settings=settings,
        )
        self.bearer = api_key is not None
        self.base_url = base_url
        self.region = region
        self.profile = profile
        self._credentials = {
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
        }

    def _make_client(self) -> Any:
        core = botocore.session.Session(profile=self.profile)
        if self.bearer:
            tokens = botocore.tokens.ScopedEnvTokenProvider(
                core, environ={BEARER_ENV: self.api_key}
            )
            core.register_component("token_provider", tokens)
        config = botocore.config.Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=self.timeout,
            read_timeout=self.timeout,
            signature_version="bearer" if self.bearer else None,
        )
        try:
            return boto3.session.Session(botocore_session=core, region_name=self.region).client(
                "bedrock-runtime", endpoint_url=self.base_url, config=config, **self._credentials
            )
        except botocore.exceptions.NoRegionError as exc:
            raise ConfigurationError(
                f"bedrock model {self.id!r}: no AWS region; set AWS_REGION or pass region="
            ) from exc

    async def _close_client(self, client: Any) -> None:
        client.close()

    def _request(self, messages: list[Message], info: RequestInfo) -> dict[str, Any]:
        settings = self._settings(info)
        tool_choice = settings.pop("tool_choice", None)
        request: dict[str, Any] = {"modelId": self.id}
        inference = {_INFERENCE[k]: v for k, v in settings.items() if k in _INFERENCE}
        for key, value in settings.items():
            if key in _REQUEST:
                request[_REQUEST[key]] = value
        if inference:
            request["inferenceConfig"] = {**request.get("inferenceConfig", {}), **inference}
        system, wire_messages = map_messages(messages)
        request["messages"] = wire_messages
        if system:
            request["system"] = [{"text": system}]
        tools = list(info.tools)
        if info.output is not None:
            tools.append(info.output.final_answer_tool())
        if tools:
            request["toolConfig"] = {"tools": map_tools(tools)}
            if info.output is not None:
                request["toolConfig"]["toolChoice"] = {"any": {}}
            elif tool_choice is not None:
                request["toolConfig"]["toolChoice"] = map_tool_choice(tool_choice)
        return request

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        async def attempt() -> Any:
            return await asyncio.to_thread(self.client.converse, **self._request(messages, info))

        data = await self._call(attempt)
        return parse_converse(data, prefix=self._prefix, model=self.id)

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        @asynccontextmanager
        async def open_chunks() -> AsyncIterator[AsyncIterator[Any]]:
            response = await asyncio.to_thread(
                self.client.converse_stream, **self._request(messages, info)
            )
            stream = response["stream"]
            try:
                yield _events(iter(stream))
            finally:
                stream.close()

        async for chunk in self._stream_chunks(
            open_chunks, lambda: ConverseStream(self._prefix, self.id), self._ended_early
        ):
            yield chunk

    @property
    def _prefix(self) -> str:
        return f"bedrock model {self.id!r}"

    def _classify(self, exc: Exception) -> Retryable | None:
        if isinstance(exc, botocore.exceptions.ClientError):
            status, headers = _status(exc), _headers(exc)
            if status_is_retryable(status, headers):
                return Retryable(retry_after=parse_retry_after(headers))
            return None
        if isinstance(exc, _TRANSPORT):
            return Retryable()
        return None

    def _translate(self, exc: Exception, *, deltas: int | None = None) -> Exception:
        prefix = self._prefix
        where = "" if deltas is None else f" ({arrived(deltas)})"
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, botocore.exceptions.ClientError):
            error = exc.response.get("Error") or {}
            status = _status(exc)
            code = str(error.get("Code") or "")
            message = redact(str(error.get("Message") or ""), self.api_key) or "(no message)"
            named = f" ({code})" if code and code != str(status) else ""
            event = isinstance(exc, botocore.exceptions.EventStreamError)
            return status_error(
                f"{prefix}: HTTP {status}: {'error event in the stream: ' if event else ''}"
                f"{message}{named}{where}",
                status,
                exc.response,
                context_length=status == 400
                and any(word in message.lower() for word in _CONTEXT_WORDS),
            )
        if isinstance(exc, _TRANSPORT):
            return connection_error(prefix, exc, api_key=self.api_key, deltas=deltas)
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return ModelAuthenticationError(
                f"{prefix}: no AWS credentials (boto3 found none); configure them as boto3 "
                f"reads them, set {BEARER_ENV}, or pass api_key="
            )
        if isinstance(
            exc,
            (
                botocore.exceptions.ParamValidationError,
                botocore.exceptions.InvalidEndpointConfigurationError,
            ),
        ):
            return ConfigurationError(f"{prefix}: boto3 refused the request: {exc}")
        if isinstance(
            exc,
            (
                botocore.parsers.ResponseParserError,
                botocore.eventstream.ParserError,
            ),
        ):
            return MalformedResponseError(f"{prefix}: the response does not parse: {exc}{where}")
        return exc


async def _events(events: Iterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """A blocking boto3 event stream as an async iterator, one event per thread hop."""
    while True:
        event = await asyncio.to_thread(next, events, None)
        if event is None:
            return
        yield event


def _status(exc: botocore.exceptions.ClientError) -> int:
    meta = exc.response.get("ResponseMetadata") or {}
    status = int(meta.get("HTTPStatusCode") or 0)
    if status >= 400:
        return status
    code = str((exc.response.get("Error") or {}).get("Code") or "").lower()
    return ERROR_STATUS.get(code, 500)


def _headers(exc: botocore.exceptions.ClientError) -> dict[str, str]:
    meta = exc.response.get("ResponseMetadata") or {}
    return {str(k).lower(): str(v) for k, v in (meta.get("HTTPHeaders") or {}).items()}


class ConverseStream:
    """ConverseStream events (`{"contentBlockDelta": {...}}`, ...) up to `metadata`, which
    follows `messageStop` and carries the usage."""

    terminator = "metadata"

    def __init__(self, prefix: str, model: str) -> None:
        self.prefix = prefix
        self.model = model
        self.done = False
        self.assembler = StreamAssembler()
        self.calls: dict[int, int] = {}  # content block index -> tool call index
        self.reasoning: dict[int, dict[str, Any]] = {}  # content block index -> block
        self.usage = Usage(requests=1)

    def feed(self, event: Any) -> Iterable[TextDelta | ToolCallDelta]:
        if not isinstance(event, dict) or len(event) != 1:
            raise MalformedResponseError(f"{self.prefix}: unexpected stream event {event!r:.300}")
        [(kind, data)] = event.items()
        try:
            return list(self._deltas(kind, data))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise MalformedResponseError(
                f"{self.prefix}: unexpected {kind} event ({type(exc).__name__}: {exc}): "
                f"{event!r:.300}"
            ) from exc

    def _deltas(self, kind: str, data: dict[str, Any]) -> Iterator[TextDelta | ToolCallDelta]:
        if kind == "contentBlockStart":
            index, start = int(data["contentBlockIndex"]), data["start"]
            if "toolUse" in start:
                self.calls[index] = len(self.calls)
                use = start["toolUse"]
                yield self.assembler.add(
                    ToolCallDelta(index=self.calls[index], id=use["toolUseId"], name=use["name"])
                )
        elif kind == "contentBlockDelta":
            yield from self._delta(int(data["contentBlockIndex"]), data["delta"])
        elif kind == "metadata":
            self.usage = _usage(data.get("usage") or {})
            self.done = True

    def _delta(self, index: int, delta: dict[str, Any]) -> Iterator[TextDelta | ToolCallDelta]:
        if "text" in delta:
            if delta["text"]:
                yield self.assembler.add(TextDelta(content=str(delta["text"])))
        elif "toolUse" in delta:
            if index not in self.calls:  # a tool block that began without its start
                raise KeyError(f"toolUse delta for block {index} without contentBlockStart")
            yield self.assembler.add(
                ToolCallDelta(index=self.calls[index], arguments_delta=delta["toolUse"]["input"])
            )
        elif "reasoningContent" in delta:
            part = delta["reasoningContent"]
            block = self.reasoning.setdefault(index, {})
            if "text" in part:
                text = block.setdefault("reasoningText", {})
                text["text"] = text.get("text", "") + str(part["text"])
            if "signature" in part:
                block.setdefault("reasoningText", {})["signature"] = str(part["signature"])
            if "redactedContent" in part:
                block["redactedContent"] = _b64(part["redactedContent"])

    def response(self) -> ModelResponse:
        response = self.assembler.response()
        response.usage = self.usage
        response.model_name = self.model
        response.reasoning = [_reasoning(self.reasoning[i]) for i in sorted(self.reasoning)]
        return response


def _b64(value: Any) -> str:
    """boto3 gives blobs as bytes; history is JSON, so they are kept as base64."""
    return base64.b64encode(value).decode() if isinstance(value, bytes) else str(value)


def _reasoning(block: dict[str, Any]) -> Reasoning:
    text = str((block.get("reasoningText") or {}).get("text") or "")
    return Reasoning(provider=PROVIDER, data=block, text=text)


def _usage(usage: dict[str, Any]) -> Usage:
    """Input tokens including prompt-cache reads and writes, which Bedrock counts apart."""
    return Usage(
        input_tokens=sum(
            int(usage.get(key) or 0)
            for key in ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
        ),
        output_tokens=int(usage.get("outputTokens") or 0),
        requests=1,
    )


def parse_converse(data: Any, *, prefix: str, model: str) -> ModelResponse:
    """A Converse response (as boto3 returns it) as a `ModelResponse`."""
    try:
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[Reasoning] = []
        for block in data["output"]["message"]["content"]:
            if "text" in block:
                texts.append(str(block["text"]))
            elif "toolUse" in block:
                use = block["toolUse"]
                arguments = use.get("input")
                error = None
                if not isinstance(arguments, dict):
                    error = f"tool input must be a JSON object, got {json.dumps(arguments)}"
                    arguments = {}
                calls.append(
                    ToolCall(use["name"], arguments, use["toolUseId"], arguments_error=error)
                )
            elif "reasoningContent" in block:
                content = dict(block["reasoningContent"])
                if "redactedContent" in content:
                    content["redactedContent"] = _b64(content["redactedContent"])
                reasoning.append(_reasoning(content))
        return ModelResponse(
            content="".join(texts) or None,
            tool_calls=calls,
            usage=_usage(data.get("usage") or {}),
            model_name=model,
            reasoning=reasoning,
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MalformedResponseError(
            f"{prefix}: unexpected Converse response ({type(exc).__name__}: {exc}): "
            f"{str(data)[:300]}"
        ) from exc


def map_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """`(system, messages)` in Converse form; same-role neighbours are merged."""
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
            add("user", [{"text": message.content or " "}])  # Bedrock refuses blank text
        elif message.role == "tool":
            result: dict[str, Any] = {
                "toolUseId": message.tool_call_id,
                "content": [{"text": message.content or " "}],
            }
            add("user", [{"toolResult": result}])
        else:
            blocks: list[dict[str, Any]] = [
                {"reasoningContent": _reasoning_block(part.data)}
                for part in message.reasoning
                if part.provider == PROVIDER
            ]
            if message.content:
                blocks.append({"text": message.content})
            blocks += [
                {"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}}
                for c in message.tool_calls
            ]
            add("assistant", blocks or [{"text": " "}])
    return "\n\n".join(system), out


def _reasoning_block(data: dict[str, Any]) -> dict[str, Any]:
    """A stored reasoning block as boto3 takes it (redacted content back to bytes)."""
    if "redactedContent" in data:
        return {"redactedContent": base64.b64decode(data["redactedContent"])}
    return dict(data)


def map_tools(tools: list[ToolDefinition]) -> list[dict[str, Any]]:
    result = []
    for tool in tools:
        spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": tool.parameters}}
        if tool.description:
            spec["description"] = tool.description
        result.append({"toolSpec": spec})
    return result


def map_tool_choice(choice: Any) -> dict[str, Any]:
    if choice == "auto":
        return {"auto": {}}
    if choice in ("required", "any"):
        return {"any": {}}
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        return {"tool": {"name": choice["name"]}}
    raise ConfigurationError(
        f"tool_choice for Bedrock is 'auto', 'required' or {{'name': ...}}, got {choice!r}"
    )
