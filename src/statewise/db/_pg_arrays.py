"""Array parameters whose PostgreSQL type is known before they are sent.

psycopg sends a plain `list` as an array of whatever its elements are, and finds out by
looking at them on every execute: the set of their types, nested lists, the largest int
(to pick int2, int4 or int8), then a dumper per element type. A commit passes about a
dozen small arrays (the writes' keys and versions, the events' fields), and a probe a few
more; that inspection was a fifth of a commit's client CPU. A `TextArray` or
`BigintArray` is a list whose dumper already knows its type (`text[]`, `bigint[]`), so
psycopg only encodes it. Connections made with `ADAPTERS` as their context know them.
"""

from __future__ import annotations

import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.types.array import ListBinaryDumper


class TextArray(list[str | None]):
    """A `text[]` parameter."""


class BigintArray(list[int | None]):
    """A `bigint[]` parameter."""


class FloatArray(list[float | None]):
    """A `double precision[]` parameter."""


def _dumper(name: str) -> type[ListBinaryDumper]:
    info = psycopg.postgres.types[name]
    attributes = {"oid": info.array_oid, "element_oid": info.oid}
    return type(f"{name.title()}ArrayDumper", (ListBinaryDumper,), attributes)


ADAPTERS = AdaptersMap(psycopg.adapters)
ADAPTERS.register_dumper(TextArray, _dumper("text"))
ADAPTERS.register_dumper(BigintArray, _dumper("int8"))
ADAPTERS.register_dumper(FloatArray, _dumper("float8"))

__all__ = ["ADAPTERS", "BigintArray", "FloatArray", "TextArray"]
