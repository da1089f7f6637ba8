"""JSON text, encoded with one reused C encoder.

`json.dumps` builds a new C encoder on every call, which costs as much as encoding the
small records a run writes (events, ops, run records) and the small argument dicts an
offline model measures. `JsonText` builds it once and reuses it; the text is exactly what
`json.dumps` with the same options gives. One encoder serves every thread: without
markers (below) it keeps no state between calls, each call accumulating its own text.

It does not track the containers it is inside (`check_circular=False`): that bookkeeping
(a dict insert and delete per container) was a fifth of encoding a run's records. A
value that contains itself still fails, with ValueError, once the encoder's recursion
limit is reached, as a value nested too deeply does with `json.dumps` too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# The C encoder `json` itself uses (None on a Python built without it); not in typeshed.
c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


class JsonText:
    """`json.dumps(value, ensure_ascii=..., separators=..., allow_nan=...)`, faster."""

    def __init__(
        self,
        *,
        ensure_ascii: bool = True,
        separators: tuple[str, str] = (", ", ": "),
        allow_nan: bool = True,
    ) -> None:
        self._plain = json.JSONEncoder(
            ensure_ascii=ensure_ascii, separators=separators, allow_nan=allow_nan
        )
        self._string = (
            json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
        )
        self._encode: Callable[[Any, int], list[str]] | None = None
        if c_make_encoder is not None:
            plain = self._plain
            self._encode = c_make_encoder(
                None,  # no markers: cycles end at the recursion limit (see the module)
                plain.default,
                self._string,
                None,
                plain.key_separator,
                plain.item_separator,
                False,
                False,
                plain.allow_nan,
            )

    def dumps(self, value: Any) -> str:
        encode = self._encode
        if encode is None or isinstance(value, str):
            return self._plain.encode(value)
        try:
            return "".join(encode(value, 0))
        except RecursionError as exc:
            raise ValueError(
                "Circular reference detected, or the value is nested too deeply"
            ) from exc


__all__ = ["JsonText"]
