"""Someone else's edited copy of a state, replayed as small recorded writes.

A frontend sends its whole state back; what it *changed* is the difference between that
copy and the state it was last given (the base). `replay_edits` makes exactly those
changes on a tracked view of the base, so they are recorded as ordinary ops (a new list
item is an `append`, a dropped one a `remove`, a changed field a `set` of that field)
and merge with what other writers did meanwhile like any other writer's ops would.
Writing the whole copy back instead would undo every change made since the base.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence
from difflib import SequenceMatcher
from typing import Any

__all__ = ["fill_missing", "replay_edits", "same_json"]


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: 1, 1.0 and True are three different values here."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def replay_edits(
    target: MutableMapping[str, Any],
    base: Mapping[str, Any],
    edited: Mapping[str, Any],
    *,
    unchanged: Callable[[str, Any], bool] = lambda key, value: False,
) -> None:
    """Change `target` (which holds `base`) the way `edited` differs from `base`.

    `unchanged(key, value)` may declare a top-level value as "no edit" (a redacted secret
    sent back as it was shown).
    """
    for key in [k for k in base if k not in edited]:
        if key in target:
            del target[key]
    for key, value in edited.items():
        if unchanged(key, value):
            continue
        if key not in base:
            target[key] = value
        else:
            _replay_value(target, key, base[key], value)


def _replay_value(parent: Any, key: str | int, before: Any, after: Any) -> None:
    if same_json(before, after):
        return
    current = parent[key]
    if isinstance(before, dict) and isinstance(after, dict) and isinstance(current, dict):
        for name in [k for k in before if k not in after]:
            if name in current:
                del current[name]
        for name, value in after.items():
            if name not in before or name not in current:
                current[name] = value
            else:
                _replay_value(current, name, before[name], value)
    elif isinstance(before, list) and isinstance(after, list) and isinstance(current, list):
        _replay_list(current, before, after)
    else:
        parent[key] = after


def _replay_list(target: MutableSequence[Any], before: list[Any], after: list[Any]) -> None:
    """Items added at the end are appended, dropped items removed, inserted ones inserted;
    an item changed in place (a dict) is edited field by field. Worked from the end, so
    each recorded index is right when it is applied."""
    matcher = SequenceMatcher(None, [_key(x) for x in before], [_key(x) for x in after], False)
    for tag, i1, i2, j1, j2 in reversed(matcher.get_opcodes()):
        if tag == "equal":
            continue
        if tag == "insert" and i1 == len(before):
            for item in after[j1:j2]:
                target.append(item)
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for offset in reversed(range(i2 - i1)):
                _replay_value(target, i1 + offset, before[i1 + offset], after[j1 + offset])
            continue
        for i in reversed(range(i1, i2)):
            del target[i]
        for offset, item in enumerate(after[j1:j2]):
            target.insert(i1 + offset, item)


def fill_missing(target: MutableMapping[str, Any], values: Mapping[str, Any]) -> None:
    """Set the keys of `values` that `target` lacks, recursing into dicts both have."""
    for key, value in values.items():
        if key not in target:
            target[key] = value
        else:
            current = target[key]
            if isinstance(current, dict) and isinstance(value, Mapping):
                fill_missing(current, value)
