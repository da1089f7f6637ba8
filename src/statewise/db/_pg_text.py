"""Free text in PostgreSQL `text` columns, NUL included.

PostgreSQL's `text` cannot hold U+0000, which SQLite, Redis and JSON hold fine (a model may
answer with one, a user may send one). The JSON columns never meet it (JSON writes it as the
escape `\\u0000`); the free-text columns of a run (input, content, error) do. A value with a
NUL, or one that starts with the marker below, is stored as the marker followed by its JSON
string form; everything else (nearly all text, and every row written before this existed)
is stored as it is, so text reads back the same on every backend.
"""

from __future__ import annotations

import json

MARKER = "\x01statewise:json:"


def encode(text: str | None) -> str | None:
    """`text` as a PostgreSQL `text` column can hold it."""
    if text is None or ("\x00" not in text and not text.startswith(MARKER)):
        return text
    return MARKER + json.dumps(text)


def decode(stored: str | None) -> str | None:
    """The text `encode` was given."""
    if stored is None or not stored.startswith(MARKER):
        return stored
    text: str = json.loads(stored[len(MARKER) :])
    return text
