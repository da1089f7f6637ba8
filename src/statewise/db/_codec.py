"""JSON in and out of storage. One place, so a faster codec is a one-line change.

Encoding reuses one C encoder per thread instead of building one per call (what
`json.dumps` does): a run encodes a dozen small records per commit, and building the
encoder was half the cost of each. The output is exactly `json.dumps` with compact
separators, `ensure_ascii=False` and `allow_nan=False`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

try:
    from json.encoder import c_make_encoder
except ImportError:  # pragma: no cover - Python builds without the C accelerator
    c_make_encoder = None

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_decode = json.JSONDecoder().decode
_local = threading.local()


class _Reused:
    """One thread's C encoder and the container ids it tracks to refuse cycles."""

    __slots__ = ("encode", "markers")

    def __init__(self) -> None:
        self.markers: dict[int, Any] = {}
        self.encode: Callable[[Any, int], list[str]] = c_make_encoder(  # type: ignore[misc]
            self.markers,
            _encoder.default,
            json.encoder.encode_basestring,
            None,
            ":",
            ",",
            False,
            False,
            False,
        )


def dumps(value: Any) -> str:
    if c_make_encoder is None or isinstance(value, str):
        return _encoder.encode(value)
    reused: _Reused | None = getattr(_local, "encoder", None)
    if reused is None:
        reused = _local.encoder = _Reused()
    try:
        return "".join(reused.encode(value, 0))
    except BaseException:
        # A refused value leaves the ids of the containers it was inside behind.
        reused.markers.clear()
        raise


def loads(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        text = text.decode()
    return _decode(text)
