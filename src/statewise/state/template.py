"""Rendering `{key}` references in instructions from state, as pure data lookup.

This runs before every model call, so templates are compiled once (cached by template
string) into literal chunks and lookups. It never uses `str.format`, attribute access or
format specs: `{x.__class__}`, `{x[0]}`, `{x:>10}` and JSON examples stay as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["render_template", "template_references"]

# A reference: a top-level key (may contain one `prefix:`), then `.segments`, then `?`.
_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*"
_REF = re.compile(
    rf"(?P<key>(?:{_NAME}:)?{_NAME})(?P<rest>(?:\.(?:{_NAME}|\d+))*)(?P<optional>\?)?"
)
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")

_Chunk = str | tuple[str, tuple[str, ...], bool, str]  # literal, or (key, path, optional, raw)


@lru_cache(maxsize=1024)
def _compile(template: str) -> tuple[_Chunk, ...]:
    chunks: list[_Chunk] = []
    pos = 0
    for match in _TOKEN.finditer(template):
        chunks.append(template[pos : match.start()])
        token = match.group(0)
        inner = match.group(1)
        if token in ("{{", "}}"):
            chunks.append(token[0])
        elif inner is not None and (ref := _REF.fullmatch(inner)):
            rest = ref.group("rest")
            parts = tuple(rest[1:].split(".")) if rest else ()
            chunks.append((ref.group("key"), parts, bool(ref.group("optional")), token))
        else:
            chunks.append(token)
        pos = match.end()
    chunks.append(template[pos:])
    return tuple(chunk for chunk in chunks if chunk != "")


_MISSING = object()


def _lookup(state: Mapping[str, Any], key: str, parts: tuple[str, ...]) -> Any:
    node: Any = state.get(key, _MISSING) if isinstance(state, Mapping) else _MISSING
    for part in parts:
        if node is _MISSING:
            return _MISSING
        if isinstance(node, Mapping):
            node = node.get(part, _MISSING)
        elif isinstance(node, list) and part.isdigit():
            index = int(part)
            node = node[index] if index < len(node) else _MISSING
        else:
            return _MISSING
    return node


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def render_template(
    template: str, state: Mapping[str, Any], missing: list[str] | None = None
) -> str:
    """Render `{key}`, `{nested.key}`, `{items.0}`, `{user:name}` and `{key?}` from state.

    Strings render as they are, other values as compact JSON. `{{`/`}}` are literal
    braces. Unknown keys and anything that is not a reference stay exactly as written;
    with `missing`, the unknown references (not the optional `{key?}` ones) are appended
    to it.
    """
    if "{" not in template and "}" not in template:
        return template
    out: list[str] = []
    for chunk in _compile(template):
        if isinstance(chunk, str):
            out.append(chunk)
            continue
        key, parts, optional, raw = chunk
        value = _lookup(state, key, parts)
        if value is _MISSING:
            out.append("" if optional else raw)
            if missing is not None and not optional:
                missing.append(".".join((key, *parts)))
        else:
            out.append(_render_value(value))
    return "".join(out)


def template_references(template: str) -> list[str]:
    """The references a template uses, in order, without duplicates (`user:name`,
    `cart.items.0`; the `?` is dropped)."""
    seen: dict[str, None] = {}
    for chunk in _compile(template):
        if not isinstance(chunk, str):
            key, parts, _, _ = chunk
            seen[".".join((key, *parts))] = None
    return list(seen)
