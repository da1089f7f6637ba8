"""Models: the interface, provider-neutral messages, offline models and providers."""

from statewise.models.base import Model
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

__all__ = [
    "Message",
    "Model",
    "ModelResponse",
    "RequestInfo",
    "StreamChunk",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolDefinition",
    "Usage",
]
