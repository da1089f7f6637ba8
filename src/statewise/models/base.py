"""The Model interface: one required method, streaming optional.

A provider subclasses `Model`, implements `request`, and may implement `request_stream`.
Providers import only this module and `messages`; they know nothing of agents or state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from statewise.models.messages import Message, ModelResponse, RequestInfo, StreamChunk


class Model(ABC):
    """A chat model. `id` names the model (for example "gpt-4o-mini")."""

    id: str = "model"

    @property
    def name(self) -> str:
        """`provider:id`, as shown in run metrics and logs."""
        return f"{self.provider}:{self.id}"

    provider: str = "custom"

    @abstractmethod
    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        """Send the conversation and return the complete answer."""

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        """Yield text and tool-call deltas, then the complete `ModelResponse` last.

        The default has no deltas: it yields the complete answer once.
        """
        yield await self.request(messages, info)
