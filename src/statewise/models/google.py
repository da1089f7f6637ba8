"""Gemini, through the Gemini API or Vertex AI, on Google's `google-genai` SDK: `Gemini`.

What the mapping must respect: the system prompt is `systemInstruction`, the assistant
role is `model`, tool results are `functionResponse` parts (an object, so a tool's text
goes in `{"result": ...}`) in a *user* turn, and the results of parallel calls must share
one turn, so same-role neighbours are merged. Function calls may come without an id
(the Gemini API leaves it out): we make one up so the run loop can pair call and result,
and never send a made-up id back.

Thinking models return `thought` parts and `thoughtSignature`s (opaque, on text or call
parts) that Gemini 3 requires back on the next turn of a tool loop. When a turn has
either, its parts are kept whole, as received, in one `Reasoning` and sent back
verbatim; otherwise the turn is rebuilt from its text and tool calls.

Responses are read as the SDK's typed objects, dumped to the wire's JSON shape
(`model_dump(mode="json", by_alias=True)`), so stored reasoning is plain JSON and the
parsing below reads what the API documents. The SDK's own retries are off; ours apply.

A typed answer (`RequestInfo.output`) is asked for natively when the request has no tools:
`response_mime_type="application/json"` with `response_json_schema`. With tools (which
Gemini models before 3 cannot combine with a response schema) it is the final-answer tool
with function calling mode ANY, as for Claude and Bedrock.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pydantic

from statewise.exceptions import (
    ConfigurationError,
    MalformedResponseError,
    MissingDependencyError,
    ModelAuthenticationError,
    ModelError,
)
from statewise.models._errors import (
    arrived,
    connection_error,
    error_message,
    redact,
    status_error,
    transport_errors,
)
from statewise.models._retry import Retryable, RetryPolicy, parse_retry_after, status_is_retryable
from statewise.models._sdk import ChunkReader, SdkModel
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
    from google import genai
    from google.auth import exceptions as auth_exceptions
    from google.genai import errors as genai_errors
    from google.genai import types
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("google-genai", "google") from _exc

PROVIDER = "google"
GENERATED_ID = "gemini-call-"
"""Prefix of the ids we give function calls that came without one."""

_CONFIG_FIELDS = frozenset(types.GenerateContentConfig.model_fields)
_ALIASES = {"max_tokens": "max_output_tokens"}
_RETRY_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


class Gemini(SdkModel["genai.Client"]):
    """A Gemini model (`google:<model>`, `gemini:<model>`, or `vertex:<model>`).

    The Gemini API takes `api_key` (default `GEMINI_API_KEY`, then `GOOGLE_API_KEY`).
    With `vertexai=True`, Vertex AI takes the credentials the SDK finds (Application
    Default Credentials, or `credentials=`), `project` and `location` (default
    `GOOGLE_CLOUD_PROJECT` and `GOOGLE_CLOUD_LOCATION`), or an express-mode `api_key`.
    `base_url` points the SDK elsewhere (a gateway, a test server) and `api_version`
    picks the path version (the SDK's default when None).

    Extra keyword arguments are `GenerateContentConfig` fields (`temperature=0`,
    `max_output_tokens=...` or `max_tokens=...`, `thinking_config={"include_thoughts":
    True}`); `tool_choice` is "auto", "none", "required" or `{"name": "<tool>"}`.
    """

    provider = PROVIDER

    def __init__(
        self,
        id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        vertexai: bool = False,
        project: str | None = None,
        location: str | None = None,
        credentials: Any = None,
        api_version: str | None = None,
        timeout: float = 60.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        client: genai.Client | None = None,
        **settings: Any,
    ) -> None:
        unknown = sorted(set(settings) - _CONFIG_FIELDS - set(_ALIASES) - {"tool_choice"})
        if unknown:
            raise ConfigurationError(
                f"gemini model {id!r}: unknown settings {', '.join(unknown)} "
                "(settings are google.genai.types.GenerateContentConfig fields)"
            )
        if not vertexai:
            api_key = (
                api_key or os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
            )
        super().__init__(
            id=id,
            api_key=api_key,
            timeout=timeout,
            retry=retry,
            max_retries=max_retries,
            client=client,
            settings=settings,
        )
        self.provider = "vertex" if vertexai else PROVIDER
        self.base_url = base_url
        self.vertexai = vertexai
        self.project = project
        self.location = location
        self.credentials = credentials
        self.api_version = api_version

    def _make_client(self) -> genai.Client:
        if not self.vertexai and not self.api_key:
            raise ModelAuthenticationError(
                f"google model {self.id!r}: no API key; set GEMINI_API_KEY (or GOOGLE_API_KEY) "
                "or pass api_key="
            )
        options = types.HttpOptions(
            base_url=self.base_url,
            api_version=self.api_version,
            timeout=int(self.timeout * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        try:
            return genai.Client(
                api_key=self.api_key,
                vertexai=self.vertexai or None,
                project=self.project,
                location=self.location,
                credentials=self.credentials,
                http_options=options,
            )
        except (auth_exceptions.GoogleAuthError, ValueError) as exc:
            raise ModelAuthenticationError(
                f"{self.provider} model {self.id!r}: no usable credentials ({exc})"
            ) from exc

    async def _close_client(self, client: genai.Client) -> None:
        await client.aio.aclose()
        client.close()

    def _config(self, messages: list[Message], info: RequestInfo) -> dict[str, Any]:
        settings = self._settings(info)
        tool_choice = settings.pop("tool_choice", None)
        config: dict[str, Any] = {_ALIASES.get(k, k): v for k, v in settings.items()}
        system, contents = map_messages(messages)
        if system:
            config["system_instruction"] = system
        tools = list(info.tools)
        if info.output is not None and not tools:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = info.output.json_schema
        elif info.output is not None:
            tools.append(info.output.final_answer_tool())
            tool_choice = "required"
        if tools:
            config["tools"] = [types.Tool(function_declarations=map_tools(tools))]
            if tool_choice is not None:
                config["tool_config"] = map_tool_choice(tool_choice)
        return {
            "model": self.id,
            "contents": contents,
            "config": types.GenerateContentConfig(**config),
        }

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        async def attempt() -> types.GenerateContentResponse:
            return await self.client.aio.models.generate_content(**self._config(messages, info))

        response = await self._call(attempt)
        reader = GeminiStream(self._prefix, self.id)
        list(reader.feed(response))
        if not reader.candidates:
            raise reader.no_candidates()
        return reader.response()

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        @asynccontextmanager
        async def open_chunks() -> AsyncIterator[AsyncIterator[Any]]:
            stream = await self.client.aio.models.generate_content_stream(
                **self._config(messages, info)
            )
            try:
                yield stream
            finally:  # closes the response when we stop at the terminator
                await stream.aclose()  # type: ignore[attr-defined]

        def incomplete(reader: ChunkReader, sent: int) -> Exception:
            assert isinstance(reader, GeminiStream)
            return (
                reader.no_candidates() if not reader.candidates else self._ended_early(reader, sent)
            )

        async for chunk in self._stream_chunks(
            open_chunks, lambda: GeminiStream(self._prefix, self.id), incomplete
        ):
            yield chunk

    @property
    def _prefix(self) -> str:
        return f"{self.provider} model {self.id!r}"

    def _classify(self, exc: Exception) -> Retryable | None:
        if isinstance(exc, genai_errors.APIError):
            headers = _headers(exc)
            if status_is_retryable(int(exc.code or 0), headers):
                return Retryable(retry_after=_retry_after(exc, headers))
            return None
        if isinstance(exc, (*transport_errors(), auth_exceptions.TransportError)):
            return Retryable()
        return None

    def _translate(self, exc: Exception, *, deltas: int | None = None) -> Exception:
        prefix = self._prefix
        where = "" if deltas is None else f" ({arrived(deltas)})"
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, genai_errors.APIError):
            status = int(exc.code or 0)
            body = exc.details
            message = redact(str(exc.message or error_message(body) or exc), self.api_key)
            lowered = message.lower()
            named = f" ({exc.status})" if exc.status else ""
            return status_error(
                f"{prefix}: HTTP {status}: {message}{named}{where}",
                status,
                body,
                context_length=status == 400
                and ("token count" in lowered or "exceeds the maximum number of tokens" in lowered),
                auth=status == 400 and "api key not valid" in lowered,
            )
        if isinstance(exc, (*transport_errors(), auth_exceptions.TransportError)):
            return connection_error(prefix, exc, api_key=self.api_key, deltas=deltas)
        if isinstance(exc, auth_exceptions.GoogleAuthError):
            return ModelAuthenticationError(f"{prefix}: {exc}")
        if isinstance(exc, (json.JSONDecodeError, genai_errors.UnknownApiResponseError)):
            return MalformedResponseError(f"{prefix}: the response is not JSON: {exc}{where}")
        if isinstance(exc, pydantic.ValidationError):
            return MalformedResponseError(
                f"{prefix}: the response does not parse: {exc.error_count()} errors, first "
                f"{exc.errors()[0]['msg']!r} at {exc.errors()[0]['loc']}{where}"
            )
        return exc


def _headers(exc: genai_errors.APIError) -> dict[str, str]:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return {str(k).lower(): str(v) for k, v in dict(headers or {}).items()}


def _retry_after(exc: genai_errors.APIError, headers: dict[str, str]) -> float | None:
    """`Retry-After`, else the `RetryInfo.retryDelay` ("30s") Google puts in error details."""
    header = parse_retry_after(headers)
    if header is not None:
        return header
    details = exc.details.get("error", {}).get("details") if isinstance(exc.details, dict) else None
    for detail in details if isinstance(details, list) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        found = _RETRY_DELAY.match(delay) if isinstance(delay, str) else None
        if found:
            return float(found.group(1))
    return None


class GeminiStream:
    """`GenerateContentResponse`s (one whole answer, or the chunks of a stream) in, deltas
    out. Parts are collected as received (text merged) for `Reasoning`; the stream is
    complete once a candidate carries a `finishReason`."""

    terminator = "a candidate with finishReason"

    def __init__(self, prefix: str, model: str) -> None:
        self.prefix = prefix
        self.model = model
        self.done = False
        self.candidates = False
        self.parts: list[dict[str, Any]] = []
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage = Usage(requests=1)
        self.model_name: str | None = None
        self.blocked: str | None = None

    def feed(self, chunk: Any) -> Iterable[TextDelta | ToolCallDelta]:
        data = chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            return list(self._deltas(data))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise MalformedResponseError(
                f"{self.prefix}: unexpected GenerateContentResponse ({type(exc).__name__}: "
                f"{exc}): {json.dumps(data)[:300]}"
            ) from exc

    def _deltas(self, data: dict[str, Any]) -> Iterator[TextDelta | ToolCallDelta]:
        self.model_name = self.model_name or data.get("modelVersion")
        if data.get("usageMetadata"):
            self.usage = _usage(data["usageMetadata"])
        feedback = data.get("promptFeedback") or {}
        self.blocked = feedback.get("blockReason") or self.blocked
        for candidate in (data.get("candidates") or [])[:1]:
            self.candidates = True
            for part in (candidate.get("content") or {}).get("parts") or []:
                yield from self._part(dict(part))
            if candidate.get("finishReason"):
                self.done = True

    def _part(self, part: dict[str, Any]) -> Iterator[TextDelta | ToolCallDelta]:
        self._keep(part)
        if "functionCall" in part:
            call = part["functionCall"]
            arguments = call.get("args") or {}
            if not isinstance(arguments, dict):
                raise TypeError("functionCall.args is not an object")
            tool_call = ToolCall(
                str(call["name"]), arguments, call.get("id") or f"{GENERATED_ID}{uuid.uuid4().hex}"
            )
            index = len(self.calls)
            self.calls.append(tool_call)
            yield ToolCallDelta(
                index=index,
                id=tool_call.id,
                name=tool_call.name,
                arguments_delta=json.dumps(arguments),
            )
        elif part.get("thought"):
            self.thoughts.append(str(part.get("text") or ""))
        elif part.get("text"):
            self.texts.append(str(part["text"]))
            yield TextDelta(content=str(part["text"]))

    def _keep(self, part: dict[str, Any]) -> None:
        """Collect `part` for `Reasoning`, merging streamed text pieces of one kind (a
        signature, which may come on the last piece, stays with the merged text)."""
        last = self.parts[-1] if self.parts else None
        text_only = {"text", "thought", "thoughtSignature"}
        if (
            last is not None
            and set(last) <= text_only
            and set(part) <= text_only
            and last.get("thought") == part.get("thought")
            and "thoughtSignature" not in last
        ):
            last["text"] = last.get("text", "") + part.get("text", "")
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
            return
        self.parts.append(part)

    def no_candidates(self) -> ModelError:
        if self.blocked:
            return ModelError(f"{self.prefix}: the prompt was blocked ({self.blocked})")
        return MalformedResponseError(f"{self.prefix}: the answer has no candidates")

    def response(self) -> ModelResponse:
        reasoning = []
        if any(p.get("thought") or "thoughtSignature" in p for p in self.parts):
            reasoning.append(
                Reasoning(
                    provider=PROVIDER, data={"parts": self.parts}, text="".join(self.thoughts)
                )
            )
        return ModelResponse(
            content="".join(self.texts) or None,
            tool_calls=list(self.calls),
            usage=self.usage,
            model_name=self.model_name or self.model,
            reasoning=reasoning,
        )


def _usage(data: dict[str, Any]) -> Usage:
    """Thinking tokens are billed as output, so they count as output here."""
    return Usage(
        input_tokens=int(data.get("promptTokenCount") or 0),
        output_tokens=int(data.get("candidatesTokenCount") or 0)
        + int(data.get("thoughtsTokenCount") or 0),
        requests=1,
    )


def map_messages(messages: list[Message]) -> tuple[str, list[types.Content]]:
    """`(system instruction, contents)`; same-role neighbours are merged into one turn."""
    system: list[str] = []
    contents: list[types.Content] = []
    names: dict[str, str] = {}  # tool call id -> tool name, for functionResponse

    def add(role: str, parts: list[types.Part]) -> None:
        if contents and contents[-1].role == role and contents[-1].parts is not None:
            contents[-1].parts.extend(parts)
        else:
            contents.append(types.Content(role=role, parts=parts))

    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
        elif message.role == "user":
            add("user", [types.Part(text=message.content or "")])
        elif message.role == "tool":
            response: dict[str, Any] = {
                "name": message.name or names.get(message.tool_call_id or "", ""),
                "response": {"result": message.content or ""},
            }
            if message.tool_call_id and not message.tool_call_id.startswith(GENERATED_ID):
                response["id"] = message.tool_call_id
            add("user", [types.Part(function_response=types.FunctionResponse(**response))])
        else:
            for call in message.tool_calls:
                names[call.id or ""] = call.name
            add("model", _model_parts(message))
    return "\n\n".join(system), contents


def _model_parts(message: Message) -> list[types.Part]:
    stored = [r for r in message.reasoning if r.provider == PROVIDER and r.data.get("parts")]
    if stored:  # as received: thoughts and signatures included
        return [types.Part.model_validate_json(json.dumps(p)) for p in stored[-1].data["parts"]]
    parts = [types.Part(text=message.content)] if message.content else []
    for call in message.tool_calls:
        function_call: dict[str, Any] = {"name": call.name, "args": call.arguments}
        if call.id and not call.id.startswith(GENERATED_ID):
            function_call["id"] = call.id
        parts.append(types.Part(function_call=types.FunctionCall(**function_call)))
    return parts or [types.Part(text="")]


def map_tools(tools: list[ToolDefinition]) -> list[types.FunctionDeclaration]:
    """Our tools as function declarations, with their JSON schema as it is."""
    return [
        types.FunctionDeclaration(
            name=tool.name,
            description=tool.description or None,
            parameters_json_schema=tool.parameters,
        )
        for tool in tools
    ]


def map_tool_choice(choice: Any) -> types.ToolConfig:
    """ "auto", "none", "required" (any tool) or `{"name": tool}` as a `ToolConfig`."""
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY", "any": "ANY"}
    if isinstance(choice, str) and choice in modes:
        config = types.FunctionCallingConfig(mode=modes[choice])
    elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
        config = types.FunctionCallingConfig(
            mode="ANY",
            allowed_function_names=[choice["name"]],
        )
    else:
        raise ConfigurationError(
            f"tool_choice for Gemini is 'auto', 'none', 'required' or {{'name': ...}}, "
            f"got {choice!r}"
        )
    return types.ToolConfig(function_calling_config=config)
