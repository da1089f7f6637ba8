import datetime as dt
import enum
import math
from collections import OrderedDict
from typing import Any

import pytest
from pydantic import BaseModel

from statewise.exceptions import StateSerializationError
from statewise.state.jsonvalue import copy_json, format_path, to_json_value


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Prefs(BaseModel):
    theme: str = "dark"
    when: dt.date = dt.date(2024, 1, 2)


def test_format_path() -> None:
    assert format_path(()) == "state"
    assert format_path(("user", "prefs", 2)) == "state['user']['prefs'][2]"


def test_plain_values_are_deep_copied() -> None:
    value = {"a": [1, 2.5, {"b": None, "c": True}], "d": "x"}
    out = to_json_value(value)
    assert out == value
    assert out is not value
    assert out["a"] is not value["a"]
    assert out["a"][2] is not value["a"][2]


def test_conversions() -> None:
    out = to_json_value(
        {"t": (1, (2, 3)), "m": OrderedDict(x=1), "p": Prefs(), "e": Color.RED, "l": Level.HIGH}
    )
    assert out == {
        "t": [1, [2, 3]],
        "m": {"x": 1},
        "p": {"theme": "dark", "when": "2024-01-02"},
        "e": "red",
        "l": 3,
    }
    assert type(out["m"]) is dict
    assert type(out["e"]) is str
    assert type(out["l"]) is int


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({1, 2}, "value of type 'set' is not JSON-serializable (store a list instead)"),
        (dt.datetime(2024, 1, 1), "'datetime' is not JSON-serializable (store value.isoformat()"),
        (b"x", "'bytes' is not JSON-serializable (store a str"),
        (print, "'builtin_function_or_method'"),
        (object(), "'object' is not JSON-serializable"),
        (math.nan, "float nan is not valid JSON"),
        (math.inf, "float inf is not valid JSON"),
    ],
)
def test_errors_name_path_and_type(value: Any, fragment: str) -> None:
    with pytest.raises(StateSerializationError) as info:
        to_json_value({"user": {"prefs": [0, 1, value]}})
    message = str(info.value)
    assert message.startswith("state['user']['prefs'][2]: ")
    assert fragment in message


def test_non_str_key() -> None:
    with pytest.raises(StateSerializationError, match=r"state\['a'\]: key 1 of type 'int'"):
        to_json_value({"a": {1: "x"}})


def test_path_prefix_is_used() -> None:
    with pytest.raises(StateSerializationError, match=r"^state\['x'\]\[0\]: "):
        to_json_value([{1}], ("x",))


def test_copy_json_is_deep_and_plain() -> None:
    class D(dict[str, Any]):
        pass

    value: Any = {"a": [1, {"b": [2]}], "c": D(x=[1])}
    out: Any = copy_json(value)
    assert out == value
    assert out["a"][1]["b"] is not value["a"][1]["b"]
    assert type(out["c"]) is dict
    assert out["c"]["x"] is not value["c"]["x"]
