"""JSON in and out of storage. One place, so a faster codec is a one-line change."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from statewise.state.gcpause import PAUSE_BYTES, collector_paused, pause_wanted
from statewise.state.jsontext import JsonText

_encoder = JsonText(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_decode = json.JSONDecoder().decode


dumps: Callable[[Any], str] = _encoder.dumps  # (the method itself: no call around it)


def loads(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        text = text.decode()
    if len(text) >= PAUSE_BYTES and pause_wanted():
        with collector_paused():
            return _decode(text)
    return _decode(text)
