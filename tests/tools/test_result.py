"""format_tool_result: what the model reads back."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pydantic import BaseModel

from statewise.tools import format_tool_result


class Profile(BaseModel):
    name: str
    tags: list[str] = []


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("as is", "as is"),
        ("", ""),
        (None, ""),
        (Profile(name="Tom"), '{"name":"Tom","tags":[]}'),
        ({"a": [1, None], "b": "é"}, '{"a":[1,null],"b":"é"}'),
        ([Profile(name="T")], '[{"name":"T","tags":[]}]'),
        ((1, 2), "[1,2]"),
        (
            {"when": datetime.date(2024, 1, 2), "what": Opaque()},
            '{"when":"2024-01-02","what":"opaque!"}',
        ),
        (3, "3"),
        (True, "True"),
        (Opaque(), "opaque!"),
    ],
)
def test_format(value: Any, text: str) -> None:
    assert format_tool_result(value) == text


def test_unserializable_container_falls_back_to_str() -> None:
    assert format_tool_result({"b": b"\xff"}) == "{'b': b'\\xff'}"
