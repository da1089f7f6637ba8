"""Plumbing shared by TrackedDict and TrackedList: paths, wrapping, detaching, undo."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, SupportsIndex

from statewise.state.jsonvalue import Path, copy_json
from statewise.state.ops import MISSING
from statewise.state.recorder import Recorder

# type(plain container) -> factory(value, parent, key) building its tracked form.
FACTORIES: dict[type, Callable[[Any, Any, Any], Any]] = {}


class Node:
    """Where am I (parent + key, walked up into a path) and who records (the root)."""

    if not TYPE_CHECKING:  # real slots live on the concrete classes (dict/list layouts)
        __slots__ = ()
    _parent: Node | None
    _key: Any
    _recorder: Recorder | None
    _root: bool
    _clean: bool  # True when no plain container is left in this node's own storage

    def _init_node(self, parent: Node | None, key: Any) -> None:
        self._parent = parent
        self._key = key
        self._recorder = None
        self._root = False
        self._clean = False

    def _context(self) -> tuple[Recorder | None, Path | None]:
        """(recorder, path); the path is None when this container is detached."""
        parts: list[str | int] = []
        node: Node = self
        while node._parent is not None:
            parts.append(node._key)
            node = node._parent
        if node._root:
            parts.reverse()
            return node._recorder, tuple(parts)
        return node._recorder, None

    def _wrap(self, key: Any, value: Any) -> Any:
        """The tracked form of a stored child, replacing a plain child in storage."""
        factory = FACTORIES.get(type(value))
        if factory is None:
            return value
        child = factory(value, self, key)
        self._store(key, child)
        return child

    def _store(self, key: Any, value: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy_json(self)

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        plain = copy_json(self)
        return (type(plain), (plain,))


def snapshot(value: Any) -> Any:
    """A plain value equal to `value` that shares its plain parts (never mutated in place).

    Only tracked containers are copied, and the plain values they hold are taken as they
    are (no call for each): after a big write, the tree is one tracked list of plain items.
    """
    if isinstance(value, Node):
        if isinstance(value, dict):
            return {k: snapshot(v) if isinstance(v, Node) else v for k, v in dict.items(value)}
        if isinstance(value, list):
            return [snapshot(v) if isinstance(v, Node) else v for v in list.__iter__(value)]
    return value


def adopt(value: Any, parent: Node, key: Any) -> Any:
    """Storage form of a freshly converted value: containers become tracked children."""
    factory = FACTORIES.get(type(value))
    return value if factory is None else factory(value, parent, key)


def detach(value: Any, recorder: Recorder | None) -> None:
    """Cut a removed child loose; it keeps the recorder for undo-only entries."""
    if isinstance(value, Node):
        value._parent = None
        value._recorder = recorder


def attach(value: Any, parent: Node, key: Any) -> None:
    if isinstance(value, Node):
        value._parent = parent
        value._key = key
        value._recorder = None
    elif type(value) in FACTORIES:
        parent._clean = False


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# --- undo actions: plain functions stored with their arguments (no closures) ------------


def undo_dict(d: dict[str, Any], key: str, old: Any, new: Any) -> None:
    if dict.get(d, key, MISSING) is new:
        detach(new, None)
    if old is MISSING:
        dict.pop(d, key, None)
    else:
        dict.__setitem__(d, key, old)
        attach(old, d, key)  # type: ignore[arg-type]


def renumber(lst: list[Any], start: int) -> None:
    """After an insert or delete, tracked children at/after `start` have new indexes."""
    for i in range(start, len(lst)):
        item = list.__getitem__(lst, i)
        if isinstance(item, Node):
            item._key = i


def undo_list_set(lst: list[Any], index: int, old: Any, new: Any) -> None:
    detach(new, None)
    list.__setitem__(lst, index, old)
    attach(old, lst, index)  # type: ignore[arg-type]


def undo_list_truncate(lst: list[Any], length: int) -> None:
    for item in list.__getitem__(lst, slice(length, None)):
        detach(item, None)
    list.__delitem__(lst, slice(length, None))


def undo_list_insert(lst: list[Any], index: int) -> None:
    detach(list.__getitem__(lst, index), None)
    list.__delitem__(lst, index)
    renumber(lst, index)


def undo_list_delete(lst: list[Any], index: int, old: Any) -> None:
    list.insert(lst, index, old)
    attach(old, lst, index)  # type: ignore[arg-type]
    renumber(lst, index)


def undo_list_rewrite(lst: list[Any], old_items: list[Any]) -> None:
    keep = {id(x) for x in old_items}
    for item in list.__iter__(lst):
        if id(item) not in keep:
            detach(item, None)
    list.__setitem__(lst, slice(None), old_items)
    for i, item in enumerate(old_items):
        attach(item, lst, i)  # type: ignore[arg-type]
