"""Turning Python values into plain JSON values, fast, with errors that say where.

Every write to state goes through `to_json_value`, so it is on the hot path: it walks the
value once (no `json.dumps`/`json.loads` round trip) and builds a private plain copy made
only of `dict[str, ...]`, `list`, `str`, `int`, `float`, `bool` and `None`. A value that is
not JSON fails *at the write*, naming the path, instead of at commit time far away.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from statewise.exceptions import StateSerializationError
from statewise.state.gcpause import PAUSE_ITEMS, collector_paused, pause_wanted

Path = tuple[str | int, ...]
"""A location in state: `("user", "prefs", 2)` is `state['user']['prefs'][2]`."""

_SCALARS = frozenset({str, int, bool, type(None)})

_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_DEPTH = 100
"""How deep containers may nest in state, counted from the top-level key (which is depth
1): `state["a"]["b"]` is at depth 2. Deeper values are refused when they are written."""

MAX_INT_BITS = 4096
MAX_INT = 2**MAX_INT_BITS - 1
"""Integers in state are at most 4096 bits (about 1233 digits): far bigger ones cost
quadratic time to print and parse; store those as strings."""

MAX_STRING_CHARS = 16 * 1024 * 1024
"""The longest single string a state value may hold."""


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


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored (a lone surrogate is not valid Unicode), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate {text[exc.start]!r} at index {exc.start}, which is not "
            "valid Unicode"
        )
    return None


def clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD (for text we pass on, not store as
    given: model output, error messages)."""
    if text_problem(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def _check_str(value: str, path: Path) -> None:
    if len(value) > MAX_STRING_CHARS:
        raise StateSerializationError(
            f"{format_path(path)}: string of {len(value)} characters is too long "
            f"(the limit is {MAX_STRING_CHARS})"
        )
    problem = text_problem(value)
    if problem is not None:
        raise StateSerializationError(f"{format_path(path)}: string {problem}")


def check_key(key: str, path: Path) -> None:
    """A state key must be valid Unicode (JSON object keys are text)."""
    problem = None if key.isascii() else text_problem(key)
    if problem is not None:
        raise StateSerializationError(f"{format_path(path)}: key {key!r} {problem}")


def _check_int(value: int, path: Path) -> None:
    if not -MAX_INT - 1 <= value <= MAX_INT:
        raise StateSerializationError(
            f"{format_path(path)}: integer with {value.bit_length()} bits is too large "
            f"(the limit is {MAX_INT_BITS} bits; store bigger numbers as strings)"
        )


def _too_deep(path: Path) -> StateSerializationError:
    return StateSerializationError(
        f"{format_path(path[:3])}...: value nests deeper than {MAX_DEPTH} levels "
        f"(the limit for state)"
    )


def _plain_scalar(item: Any) -> bool:
    """True for the common scalars that need no conversion nor check (the fast path)."""
    sub = type(item)
    if sub is str:
        return item.isascii() and len(item) <= MAX_STRING_CHARS
    if sub is int:
        return -MAX_INT - 1 <= item <= MAX_INT  # type: ignore[no-any-return]
    return sub is bool or item is None


def to_json_value(value: Any, path: Path = ()) -> Any:
    """Return a deep plain-JSON copy of `value`, or raise naming the path and the type.

    Tuples become lists, str-keyed Mappings become dicts, pydantic models are dumped in
    JSON mode, subclasses of str/int/float (enums) become the plain type. NaN and
    infinities, non-str keys, datetimes, bytes, sets, functions and other objects raise
    `StateSerializationError`.
    """
    tp = type(value)
    if tp is str:
        if not value.isascii() or len(value) > MAX_STRING_CHARS:
            _check_str(value, path)
        return value
    if tp is int:
        if not -MAX_INT - 1 <= value <= MAX_INT:
            _check_int(value, path)
        return value
    if tp is bool or value is None:
        return value
    if tp is float:
        if math.isfinite(value):
            return value
        raise StateSerializationError(
            f"{format_path(path)}: float {value!r} is not valid JSON (NaN and infinity "
            "are not allowed; store None or a string instead)"
        )
    if len(path) > MAX_DEPTH:
        raise _too_deep(path)
    if (tp is list or tp is dict) and len(value) >= PAUSE_ITEMS and pause_wanted():
        with collector_paused():
            return to_json_value(value, path)
    if tp is list:  # before the Mapping check, which is slow for a list
        out_list = list.copy(value)  # in C; the items that need it are replaced below
        for i, item in enumerate(out_list):
            # The common scalars inline (a call for each was a third of a big write).
            sub = type(item)
            if sub is str:
                if item.isascii() and len(item) <= MAX_STRING_CHARS:
                    continue
            elif sub is int:
                if -MAX_INT - 1 <= item <= MAX_INT:
                    continue
            elif sub is bool or item is None:
                continue
            out_list[i] = to_json_value(item, (*path, i))
        return out_list
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
            if not key.isascii():
                check_key(key, (*path, key))
            sub = type(item)
            if sub is str:
                if not item.isascii() or len(item) > MAX_STRING_CHARS:
                    _check_str(item, (*path, key))
            elif sub is int:
                if not -MAX_INT - 1 <= item <= MAX_INT:
                    _check_int(item, (*path, key))
            elif sub is not bool and item is not None:
                item = to_json_value(item, (*path, key))
            out[key] = item
        return out
    if tp is list or tp is tuple or isinstance(value, list | tuple):
        seq = list.__iter__(value) if isinstance(value, list) else iter(value)
        return [
            item if _plain_scalar(item) else to_json_value(item, (*path, i))
            for i, item in enumerate(seq)
        ]
    if isinstance(value, BaseModel):
        return to_json_value(value.model_dump(mode="json"), path)
    if isinstance(value, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(value)
    if isinstance(value, str):
        return to_json_value(str.__str__(value), path)
    if isinstance(value, int):
        return to_json_value(int.__int__(value), path)
    if isinstance(value, float):
        return to_json_value(float.__float__(value), path)
    raise _fail(value, path)


def copy_json(value: Any) -> Any:
    """Deep copy of a value that is already plain JSON (much faster than copy.deepcopy).

    dict and list subclasses (our tracked containers) come out as plain dicts and lists;
    their raw storage is read directly, so no lazy wrapping is triggered.
    """
    tp = type(value)
    if tp is not dict and tp is not list and not isinstance(value, (dict, list)):
        return value
    if len(value) >= PAUSE_ITEMS and pause_wanted():
        with collector_paused():
            return copy_json(value)
    if tp is dict:
        return {
            k: v if type(v) in _SCALARS or type(v) is float else copy_json(v)
            for k, v in value.items()
        }
    if tp is list:
        return [v if type(v) in _SCALARS or type(v) is float else copy_json(v) for v in value]
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in dict.items(value)}
    return [copy_json(v) for v in list.__iter__(value)]
