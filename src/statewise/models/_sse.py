"""Server-sent events, read line by line, and the contract of a provider's stream reader.

We read streams ourselves instead of through the SDKs' stream classes, because those
cannot tell a complete stream from one that stopped early: they end quietly when the body
ends, whether or not the terminator (`data: [DONE]`, `message_stop`, `response.completed`)
came, and they end quietly when the body was not SSE at all. Reading the lines here lets a
provider insist on its terminator, see error events with their type, and lets the caller
(`SdkModel._stream_request`) count the deltas that reached the consumer.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from statewise.exceptions import MalformedResponseError
from statewise.models.messages import ModelResponse, TextDelta, ToolCallDelta

STRAY_LIMIT = 300


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str | None
    data: str

    def json(self) -> Any:
        """The data as JSON; a `MalformedResponseError` (by the caller's prefix) if not."""
        return json.loads(self.data)


class SseParser:
    """Feeds lines, returns complete events (per the SSE spec: `event:`/`data:` fields,
    comments, an event ends at a blank line). Lines that are not SSE at all are kept, up to
    `STRAY_LIMIT` characters, so an error can show what the server sent instead."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self.stray = ""
        self.events = 0

    def feed(self, line: str) -> SseEvent | None:
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field in ("id", "retry"):
            pass
        elif len(self.stray) < STRAY_LIMIT:
            self.stray += line[: STRAY_LIMIT - len(self.stray)]
        return None

    def close(self) -> SseEvent | None:
        """The last event, if the body ended without the blank line after it."""
        return self._dispatch()

    def _dispatch(self) -> SseEvent | None:
        if not self._data and self._event is None:
            return None
        event = SseEvent(event=self._event, data="\n".join(self._data))
        self._event, self._data = None, []
        self.events += 1
        return event


async def sse_events(lines: AsyncIterator[str], parser: SseParser) -> AsyncIterator[SseEvent]:
    async for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
    last = parser.close()
    if last is not None:
        yield last


class StreamReader(ABC):
    """One provider's reading of one stream: events in, deltas out, a response at the end.

    `feed` may raise `StreamErrorEvent` for an error event; `done` turns true when the
    terminator arrived. `terminator` names it for error messages.
    """

    terminator: str
    done: bool = False

    @abstractmethod
    def feed(self, event: SseEvent) -> Iterable[TextDelta | ToolCallDelta]:
        """The deltas in `event`, in order."""

    @abstractmethod
    def response(self) -> ModelResponse:
        """The complete answer (called once `done`)."""


Delta = TextDelta | ToolCallDelta
EventHandler = Callable[[Any, dict[str, Any]], Iterable[Delta] | None]


class TypedEventStream(StreamReader):
    """A stream of JSON objects each named by its `type` (or its SSE `event:` name), as the
    Anthropic Messages and OpenAI Responses APIs send them.

    The per-event reading is here once: parse, check it is an object, find its handler,
    and turn a field missing from a known event into a `MalformedResponseError` that
    shows the event. A provider gives only `handlers`, its mapping from event name to a
    method returning that event's deltas (or None); events it does not name are skipped.
    """

    handlers: ClassVar[Mapping[str, EventHandler]]
    prefix: str

    def feed(self, event: SseEvent) -> Iterable[Delta]:
        data = parse_json(event, self.prefix)
        if not isinstance(data, dict):
            raise MalformedResponseError(f"{self.prefix}: a stream event is not an object")
        kind = data.get("type") or event.event
        handler = self.handlers.get(str(kind))
        if handler is None:
            return []
        try:
            return list(handler(self, data) or ())
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise MalformedResponseError(
                f"{self.prefix}: unexpected {kind} event ({type(exc).__name__}: {exc}): "
                f"{event.data[:300]}"
            ) from exc


def parse_json(event: SseEvent, prefix: str) -> Any:
    try:
        return event.json()
    except ValueError as exc:
        raise MalformedResponseError(
            f"{prefix}: a stream event is not JSON ({exc}): {event.data[:200]!r}"
        ) from exc
