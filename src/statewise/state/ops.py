"""Path operations: the unit in which state changes are recorded, stored and merged.

A delta is a list of `Op`. Ops are small and mostly commute (append, remove, increment,
sets of different keys), which is what lets two writers of one session merge instead of
losing an update. `apply_op` is the single definition of what each op means; the tracked
state view, the storage layer and rebase all go through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from statewise.exceptions import StateOpError
from statewise.state.jsonvalue import Path, copy_json, format_path

__all__ = ["MISSING", "Op", "OpKind", "Path", "apply_op", "apply_ops"]

OpKind = Literal["set", "delete", "append", "extend", "insert", "remove", "increment"]
OP_KINDS: Final[frozenset[str]] = frozenset(get_args(OpKind))


class _Missing:
    """The 'no value here' sentinel: distinct from None, which is a valid JSON value."""

    __slots__ = ()
    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One change at one path.

    `prior` is the value at `path` just before a set/delete/increment. It lives in
    memory only (merge reducers need the base value) and is never serialized.
    """

    op: OpKind
    path: Path
    value: Any = None
    index: int | None = None
    prior: Any = field(default=MISSING, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"op": self.op, "path": list(self.path), "value": self.value}
        if self.index is not None:
            data["index"] = self.index
        return data

    @classmethod
    def from_json(cls, data: Any) -> Op:
        """Rebuild an op from `to_json` output; a malformed record raises StateOpError."""
        if not isinstance(data, Mapping):
            raise StateOpError(f"an op must be a JSON object, got {type(data).__name__}")
        kind = data.get("op")
        if kind not in OP_KINDS:
            raise StateOpError(f"unknown op {kind!r}; expected one of {sorted(OP_KINDS)}")
        raw_path = data.get("path")
        if not isinstance(raw_path, list | tuple) or not raw_path:
            raise StateOpError(f"op path must be a non-empty list, got {raw_path!r}")
        if not isinstance(raw_path[0], str):
            raise StateOpError(f"op path must start with a str key, got {raw_path!r}")
        for part in raw_path:
            if isinstance(part, bool) or not isinstance(part, str | int):
                raise StateOpError(f"op path parts must be str or int, got {part!r}")
        index = data.get("index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise StateOpError(f"op index must be an int, got {index!r}")
        if kind == "insert" and index is None:
            raise StateOpError("an insert op needs an index")
        unknown = set(data) - {"op", "path", "value", "index"}
        if unknown:
            raise StateOpError(f"unknown op fields: {sorted(unknown)}")
        return cls(op=kind, path=tuple(raw_path), value=data.get("value"), index=index)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a dict"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def _child(container: Any, key: str | int) -> Any:
    """The child at key, or MISSING; a wrong container type raises StateOpError."""
    if isinstance(container, dict):
        if not isinstance(key, str):
            raise StateOpError(f"cannot use index {key!r} on a dict")
        return container.get(key, MISSING)
    if isinstance(container, list):
        if not isinstance(key, int):
            raise StateOpError(f"cannot use key {key!r} on a list")
        return container[key] if -len(container) <= key < len(container) else MISSING
    raise StateOpError(f"cannot look up {key!r} in {_kind(container)}")


def _walk(doc: dict[str, Any], path: Path, verb: str, *, create: bool) -> Any:
    """The container holding `path[-1]`; creates missing dicts when `create`, else MISSING."""
    node: Any = doc
    for depth, key in enumerate(path[:-1]):
        try:
            child = _child(node, key)
        except StateOpError:
            raise StateOpError(
                f"cannot {verb} {format_path(path)}: {format_path(path[:depth])} is {_kind(node)}"
            ) from None
        if child is MISSING:
            if not create:
                return MISSING
            if not isinstance(node, dict):
                raise StateOpError(
                    f"cannot {verb} {format_path(path)}: index {key} is out of range "
                    f"for {format_path(path[:depth])}"
                )
            node[key] = {}
            child = node[key]  # (a tracked tree stores its own tracked copy)
        elif not isinstance(child, dict | list):
            raise StateOpError(
                f"cannot {verb} {format_path(path)}: {format_path(path[: depth + 1])} "
                f"is {_kind(child)}, not a container"
            )
        node = child
    if not isinstance(node, dict | list):  # pragma: no cover - guarded above
        raise StateOpError(f"cannot {verb} {format_path(path)}")
    return node


def _own(value: Any) -> Any:
    return copy_json(value) if isinstance(value, dict | list) else value


def _target_list(doc: dict[str, Any], op: Op, *, create: bool) -> list[Any] | None:
    parent = _walk(doc, op.path, op.op, create=create)
    if parent is MISSING:
        return None
    key = op.path[-1]
    try:
        target = _child(parent, key)
    except StateOpError:
        raise StateOpError(
            f"cannot {op.op} {format_path(op.path)}: {format_path(op.path[:-1])} is {_kind(parent)}"
        ) from None
    if target is MISSING:
        if not create:
            return None
        if not isinstance(parent, dict):
            raise StateOpError(f"cannot {op.op} {format_path(op.path)}: index out of range")
        parent[key] = []
        target = parent[key]  # (a tracked tree stores its own tracked copy)
    if not isinstance(target, list):
        prep = "to" if op.op in ("append", "extend") else "in" if op.op == "insert" else "from"
        raise StateOpError(
            f"cannot {op.op} {prep} {format_path(op.path)}: it is {_kind(target)}, not a list"
        )
    return target


def apply_op(doc: dict[str, Any], op: Op) -> None:
    """Apply one op to a JSON doc in place; values are copied, never aliased. On a
    tracked tree the change is recorded like any other write."""
    kind = op.op
    path = op.path
    if kind == "set":
        parent = _walk(doc, path, "set", create=True)
        key = path[-1]
        if isinstance(parent, dict) and isinstance(key, str):
            parent[key] = _own(op.value)
        elif isinstance(parent, list) and isinstance(key, int):
            if not -len(parent) <= key < len(parent):
                raise StateOpError(f"cannot set {format_path(path)}: index out of range")
            parent[key] = _own(op.value)
        else:
            raise StateOpError(
                f"cannot set {format_path(path)}: {format_path(path[:-1])} is {_kind(parent)}"
            )
    elif kind == "delete":
        parent = _walk(doc, path, "delete", create=False)
        if parent is MISSING:
            return
        key = path[-1]
        if isinstance(parent, dict) and isinstance(key, str):
            parent.pop(key, None)
        elif isinstance(parent, list) and isinstance(key, int):
            if -len(parent) <= key < len(parent):
                del parent[key]
        else:
            raise StateOpError(
                f"cannot delete {format_path(path)}: {format_path(path[:-1])} is {_kind(parent)}"
            )
    elif kind == "append":
        target = _target_list(doc, op, create=True)
        assert target is not None
        target.append(_own(op.value))
    elif kind == "extend":
        target = _target_list(doc, op, create=True)
        assert target is not None
        if not isinstance(op.value, list):
            raise StateOpError(f"cannot extend {format_path(path)} with {_kind(op.value)}")
        target.extend(copy_json(op.value))
    elif kind == "insert":
        target = _target_list(doc, op, create=True)
        assert target is not None
        target.insert(op.index if op.index is not None else len(target), _own(op.value))
    elif kind == "remove":
        target = _target_list(doc, op, create=False)
        if target is None:
            return
        i = op.index
        if i is not None and 0 <= i < len(target) and target[i] == op.value:
            del target[i]
        else:
            with contextlib.suppress(ValueError):
                target.remove(op.value)
    elif kind == "increment":
        _increment(doc, op)
    else:
        raise StateOpError(f"unknown op {kind!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _increment(doc: dict[str, Any], op: Op) -> None:
    path = op.path
    if not _is_number(op.value):
        raise StateOpError(f"cannot increment {format_path(path)} by {_kind(op.value)}")
    parent = _walk(doc, path, "increment", create=True)
    key = path[-1]
    increment = getattr(parent, "increment", None)
    if increment is not None and isinstance(key, str):
        # A tracked dict: recorded as an increment (it keeps merging with other writers)
        # and with its own checks, no generic conversion of the sum.
        increment(key, op.value)
        return
    try:
        current = _child(parent, key)
    except StateOpError:
        raise StateOpError(
            f"cannot increment {format_path(path)}: {format_path(path[:-1])} is {_kind(parent)}"
        ) from None
    if current is MISSING:
        if isinstance(parent, list):
            raise StateOpError(f"cannot increment {format_path(path)}: index out of range")
        current = 0
    elif not _is_number(current):
        raise StateOpError(
            f"cannot increment {format_path(path)}: it is {_kind(current)}, not a number"
        )
    parent[key] = current + op.value


def apply_ops(doc: dict[str, Any], ops: Iterable[Op]) -> None:
    """Apply ops in order (see `apply_op`)."""
    for op in ops:
        apply_op(doc, op)
