"""Turning Python values into plain JSON values, fast, with errors that say where.

Every write to state goes through `to_json_value`, so it is on the hot path: it walks the
value once (no `json.dumps`/`json.loads` round trip) and builds a private plain copy made
only of `dict[str, ...]`, `list`, `str`, `int`, `float`, `bool` and `None`. A value that is
not JSON fails *at the write*, naming the path, instead of at commit time far away.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from statewise.exceptions import StateSerializationError

Path = tuple[str | int, ...]
"""A location in state: `("user", "prefs", 2)` is `state['user']['prefs'][2]`."""

_SCALARS = frozenset({str, int, bool, type(None)})


def format_path(path: Path) -> str:
    """`("user", "prefs", 2)` -> `state['user']['prefs'][2]` (the form used in messages)."""
    return "state" + "".join(f"[{part!r}]" for part in path)


def _hint(value: Any) -> str:
    if isinstance(value, set | frozenset):
        return " (store a list instead)"
    if isinstance(value, _dt.date | _dt.time | _dt.datetime):
        return " (store value.isoformat() instead)"
    if isinstance(value, bytes | bytearray | memoryview):
        return " (store a str instead, e.g. base64-encoded)"
    if callable(value):
        return " (functions cannot be stored in state)"
    return ""


def _fail(value: Any, path: Path) -> StateSerializationError:
    return StateSerializationError(
        f"{format_path(path)}: value of type {type(value).__name__!r} "
        f"is not JSON-serializable{_hint(value)}"
    )


def to_json_value(value: Any, path: Path = ()) -> Any:
    """Return a deep plain-JSON copy of `value`, or raise naming the path and the type.

    Tuples become lists, str-keyed Mappings become dicts, pydantic models are dumped in
    JSON mode, subclasses of str/int/float (enums) become the plain type. NaN and
    infinities, non-str keys, datetimes, bytes, sets, functions and other objects raise
    `StateSerializationError`.
    """
    tp = type(value)
    if tp in _SCALARS:
        return value
    if tp is float:
        if math.isfinite(value):
            return value
        raise StateSerializationError(
            f"{format_path(path)}: float {value!r} is not valid JSON (NaN and infinity "
            "are not allowed; store None or a string instead)"
        )
    if tp is list:  # before the Mapping check, which is slow for a list
        return [
            item if type(item) in _SCALARS else to_json_value(item, (*path, i))
            for i, item in enumerate(value)
        ]
    if tp is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        items = dict.items(value) if isinstance(value, dict) else value.items()
        for key, item in items:
            if type(key) is not str:
                if not isinstance(key, str):
                    raise StateSerializationError(
                        f"{format_path(path)}: key {key!r} of type {type(key).__name__!r} "
                        "is not a string (JSON object keys must be str)"
                    )
                key = str.__str__(key)
            sub = type(item)
            out[key] = item if sub in _SCALARS else to_json_value(item, (*path, key))
        return out
    if tp is list or tp is tuple or isinstance(value, list | tuple):
        seq = list.__iter__(value) if isinstance(value, list) else iter(value)
        return [
            item if type(item) in _SCALARS else to_json_value(item, (*path, i))
            for i, item in enumerate(seq)
        ]
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return to_json_value(float.__float__(value), path)
    raise _fail(value, path)


def copy_json(value: Any) -> Any:
    """Deep copy of a value that is already plain JSON (much faster than copy.deepcopy).

    dict and list subclasses (our tracked containers) come out as plain dicts and lists;
    their raw storage is read directly, so no lazy wrapping is triggered.
    """
    tp = type(value)
    if tp is dict:
        return {
            k: v if type(v) in _SCALARS or type(v) is float else copy_json(v)
            for k, v in value.items()
        }
    if tp is list:
        return [v if type(v) in _SCALARS or type(v) is float else copy_json(v) for v in value]
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in dict.items(value)}
    if isinstance(value, list):
        return [copy_json(v) for v in list.__iter__(value)]
    return value
