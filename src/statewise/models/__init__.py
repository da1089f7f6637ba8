"""Models: the interface, provider-neutral messages, offline models and providers.

Providers are not imported here, so the core needs no SDK: use `infer_model("openai:...")`
or import `statewise.models.openai_chat` (the provider classes are also reachable lazily as
`statewise.models.OpenAIChat`, `OpenAIResponses`, `Claude`, `AzureOpenAIChat`, `Gemini`
and `Bedrock`). `docs/providers.md` lists every provider string.

`ALLOW_MODEL_REQUESTS` is the global switch for real requests: set it to `False` (tests do,
in a conftest) and every real provider raises `ModelRequestsDisabledError` before any
network I/O. Offline models (`FunctionModel`, `TestModel`, `ReplayModel`) ignore it.
"""

from __future__ import annotations

import importlib
from typing import Any

from statewise.models._guard import bind_switch
from statewise.models.base import Model
from statewise.models.function import FunctionModel
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
from statewise.models.registry import infer_model, register_provider
from statewise.models.replay import RecordingModel, ReplayModel
from statewise.models.test import TestModel

ALLOW_MODEL_REQUESTS: bool = True
bind_switch(globals())  # providers read the switch here, at call time

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "FunctionModel",
    "Message",
    "Model",
    "ModelResponse",
    "Reasoning",
    "RecordingModel",
    "ReplayModel",
    "RequestInfo",
    "StreamChunk",
    "TestModel",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolDefinition",
    "Usage",
    "infer_model",
    "register_provider",
]

_LAZY = {
    "OpenAIChat": "statewise.models.openai_chat",
    "OpenAIResponses": "statewise.models.openai_responses",
    "Claude": "statewise.models.anthropic",
    "AzureOpenAIChat": "statewise.models.azure",
    "Gemini": "statewise.models.google",
    "Bedrock": "statewise.models.bedrock",
}


def __getattr__(name: str) -> Any:
    """Import a provider class on first access, so its SDK is only needed when used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
