"""Provider-neutral messages: what the run loop sends to a model and gets back.

Domain types are plain dataclasses; they convert to and from JSON-ready dicts so that
runs can be stored and replayed without pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(kw_only=True, slots=True)
class ToolCall:
    """A model's request to call one tool.

    `arguments_error` is set by providers when the model sent arguments that are not a JSON
    object; the run loop then answers the call with that error instead of running the tool.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    arguments_error: str | None = None

    def __init__(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        id: str | None = None,
        *,
        arguments_error: str | None = None,
    ) -> None:
        self.name = name
        self.arguments = dict(arguments or {})
        self.id = id
        self.arguments_error = arguments_error

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "arguments": self.arguments, "id": self.id}
        if self.arguments_error is not None:
            data["arguments_error"] = self.arguments_error
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(
            data["name"],
            data.get("arguments") or {},
            data.get("id"),
            arguments_error=data.get("arguments_error"),
        )


@dataclass(kw_only=True, slots=True)
class Reasoning:
    """What a model thought before it answered, kept so it can be sent back.

    Anthropic requires the `thinking` blocks of a turn that called tools to be passed back
    with their signature, and the Responses API wants its `reasoning` items back to carry
    the model's reasoning across steps. `provider` names the API that produced it
    ("anthropic" or "openai-responses"); only that API is sent it again. `data` is the
    block or item exactly as received (signature or encrypted content included); `text`
    is its readable part, which may be empty (redacted thinking, encrypted reasoning).
    """

    provider: str
    data: dict[str, Any]
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "data": self.data, "text": self.text}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reasoning:
        return cls(
            provider=str(data["provider"]), data=dict(data["data"]), text=data.get("text") or ""
        )


@dataclass(kw_only=True, slots=True)
class Usage:
    """Token counts of one or more model requests."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            requests=self.requests + other.requests,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "requests": self.requests,
        }


@dataclass(kw_only=True, slots=True)
class Message:
    """One message of a conversation. The system message, when there is one, comes first."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: list[Reasoning] = field(default_factory=list)
    """An assistant turn's reasoning (thinking blocks, reasoning items), sent back to the
    provider that produced it."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.reasoning:
            data["reasoning"] = [part.to_dict() for part in self.reasoning]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls") or []],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            reasoning=[Reasoning.from_dict(r) for r in data.get("reasoning") or []],
        )


@dataclass(kw_only=True, slots=True)
class ModelResponse:
    """What a model answered: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_name: str | None = None
    reasoning: list[Reasoning] = field(default_factory=list)

    def to_message(self) -> Message:
        return Message(
            role="assistant",
            content=self.content,
            tool_calls=list(self.tool_calls),
            reasoning=list(self.reasoning),
        )


@dataclass(kw_only=True, slots=True)
class ToolDefinition:
    """A tool as the model sees it: a name, a description and a JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


FINAL_ANSWER_TOOL = "final_answer"
"""The tool a provider without native structured output offers for the answer: the
model calls it with the answer as its arguments, and the run takes those as the answer."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputSpec:
    """The answer format a request asks for (`RequestInfo.output`).

    `strict` is true when the schema fits OpenAI's strict structured outputs (every
    property required, no additional properties, only supported keywords): then the
    provider can ask for it strictly and the answer always parses."""

    name: str
    json_schema: dict[str, Any]
    description: str | None = None
    strict: bool = False

    def final_answer_tool(self) -> ToolDefinition:
        """The answer as a tool to call, for providers without native structured output."""
        return ToolDefinition(
            name=FINAL_ANSWER_TOOL,
            description=(
                f"Give your final answer ({self.name}) by calling this tool with it as the "
                "arguments; call it once you have everything you need, instead of "
                "answering in text."
            ),
            parameters=self.json_schema,
        )


@dataclass(kw_only=True, slots=True)
class RequestInfo:
    """Everything about a request that is not a message: the tools, the run, settings,
    and the answer format (`output`) when the run wants a typed answer."""

    tools: list[ToolDefinition] = field(default_factory=list)
    output: OutputSpec | None = None
    run_id: str | None = None
    step: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class TextDelta:
    """A piece of streamed answer text."""

    content: str


@dataclass(kw_only=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call; `index` says which call of the response it extends."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


StreamChunk = TextDelta | ToolCallDelta | ModelResponse
