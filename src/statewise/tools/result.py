"""`format_tool_result`: a tool's return value as the text a model reads."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

_JSON_TYPES = (BaseModel, dict, list, tuple, set, frozenset)


def format_tool_result(value: Any) -> str:
    """Strings as they are, None as "", models and containers as compact JSON, else str().

    Compact JSON (no spaces) matches how state renders in templates and costs the fewest
    tokens. Values inside containers that JSON cannot express fall back to their str().
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, _JSON_TYPES):
        try:
            return to_json(value, fallback=str).decode()
        except PydanticSerializationError:
            return str(value)
    return str(value)
