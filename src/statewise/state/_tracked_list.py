"""TrackedList: a real list that records its mutations (see `statewise.state.tracked`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, SupportsIndex, overload

from statewise.state import _tracked_base as base
from statewise.state.jsonvalue import to_json_value
from statewise.state.ops import Op


class TrackedList(base.Node, list[Any]):
    """A list in a state tree; appends, removes and inserts record mergeable ops, the
    rarer whole-list rewrites (sort, slices, ...) record one `set` of the list."""

    __slots__ = ("_clean", "_key", "_parent", "_recorder", "_root")

    def __init__(self, iterable: Iterable[Any] = ()) -> None:
        list.__init__(self, iterable)
        self._init_node(None, None)

    @classmethod
    def _make(cls, data: list[Any], parent: base.Node | None, key: Any) -> TrackedList:
        obj = list.__new__(cls)
        list.extend(obj, data)
        obj._init_node(parent, key)
        return obj

    def _store(self, key: Any, value: Any) -> None:
        list.__setitem__(self, key, value)

    def _wrap_all(self) -> None:
        if not self._clean:
            factories = base.FACTORIES
            for i, value in enumerate(list.__iter__(self)):
                if type(value) in factories:
                    self._wrap(i, value)
            self._clean = True

    # --- reads ----------------------------------------------------------------------------

    @overload
    def __getitem__(self, index: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        if isinstance(index, slice):
            self._wrap_all()
            return list.__getitem__(self, index)
        value = list.__getitem__(self, index)
        if type(value) in base.FACTORIES:
            i = index.__index__()
            return self._wrap(i + len(self) if i < 0 else i, value)
        return value

    def __iter__(self) -> Iterator[Any]:
        self._wrap_all()
        return list.__iter__(self)

    def __reversed__(self) -> Iterator[Any]:
        self._wrap_all()
        return list.__reversed__(self)

    def copy(self) -> list[Any]:
        """A shallow plain list whose container items are still tracked (like list.copy)."""
        self._wrap_all()
        return list(list.__iter__(self))

    __copy__ = copy

    def __add__(self, other: Any) -> list[Any]:
        return self.copy() + other  # type: ignore[no-any-return]

    def __radd__(self, other: Any) -> list[Any]:
        return other + self.copy()  # type: ignore[no-any-return]

    def __mul__(self, n: SupportsIndex) -> list[Any]:
        return self.copy() * n

    __rmul__ = __mul__

    # --- writes ---------------------------------------------------------------------------

    def append(self, value: Any) -> None:
        recorder, path = self._context()
        index = len(self)
        converted = to_json_value(value, (*(path or ()), index))
        list.append(self, base.adopt(converted, self, index))
        if recorder is not None:
            op = None if path is None else Op(op="append", path=path, value=converted)
            recorder.push(op, base.undo_list_truncate, self, index)

    def extend(self, values: Iterable[Any]) -> None:
        recorder, path = self._context()
        start = len(self)
        prefix = path or ()
        converted = [to_json_value(v, (*prefix, start + i)) for i, v in enumerate(values)]
        list.extend(self, [base.adopt(v, self, start + i) for i, v in enumerate(converted)])
        if recorder is not None:
            op = None if path is None else Op(op="extend", path=path, value=converted)
            recorder.push(op, base.undo_list_truncate, self, start)

    def __iadd__(self, values: Iterable[Any]) -> TrackedList:  # type: ignore[misc]
        self.extend(values)
        return self

    def insert(self, index: SupportsIndex, value: Any) -> None:
        recorder, path = self._context()
        n = len(self)
        i = index.__index__()
        i = max(0, i + n) if i < 0 else min(i, n)
        converted = to_json_value(value, (*(path or ()), i))
        list.insert(self, i, base.adopt(converted, self, i))
        base.renumber(self, i + 1)
        if recorder is not None:
            op = None if path is None else Op(op="insert", path=path, value=converted, index=i)
            recorder.push(op, base.undo_list_insert, self, i)

    def _delete_at(self, i: int) -> Any:
        """Remove the item at a normalized index; recorded as an idempotent `remove`."""
        recorder, path = self._context()
        old = list.__getitem__(self, i)
        list.__delitem__(self, i)
        base.renumber(self, i)
        base.detach(old, recorder)
        if recorder is not None:
            op = None
            if path is not None:
                op = Op(op="remove", path=path, value=base.snapshot(old), index=i)
            recorder.push(op, base.undo_list_delete, self, i, old)
        return old

    def _normalize(self, index: SupportsIndex, what: str) -> int:
        n = len(self)
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{what} index out of range")
        return i

    def pop(self, index: SupportsIndex = -1) -> Any:
        if not len(self):
            raise IndexError("pop from empty list")
        old = self._delete_at(self._normalize(index, "pop"))
        factory = base.FACTORIES.get(type(old))
        return old if factory is None else factory(old, None, None)

    def remove(self, value: Any) -> None:
        self._delete_at(list.index(self, value))

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        if isinstance(index, slice):
            self._rewrite(lambda: list.__delitem__(self, index))
        else:
            self._delete_at(self._normalize(index, "list assignment"))

    def __setitem__(self, index: SupportsIndex | slice, value: Any) -> None:
        recorder, path = self._context()
        prefix = path or ()
        if isinstance(index, slice):
            converted = [to_json_value(v, (*prefix, index.start or 0)) for v in value]
            self._rewrite(lambda: list.__setitem__(self, index, converted))
            return
        i = self._normalize(index, "list assignment")
        converted = to_json_value(value, (*prefix, i))
        old = list.__getitem__(self, i)
        stored = base.adopt(converted, self, i)
        list.__setitem__(self, i, stored)
        base.detach(old, recorder)
        if recorder is not None:
            op = None
            if path is not None:
                op = Op(op="set", path=(*path, i), value=converted, prior=base.snapshot(old))
            recorder.push(op, base.undo_list_set, self, i, old, stored)

    def _rewrite(self, mutate: Callable[[], None]) -> None:
        """Run a whole-list mutation on raw storage and record it as one `set`."""
        recorder, path = self._context()
        old_items = list(list.__iter__(self))
        mutate()
        current = {id(x) for x in list.__iter__(self)}
        for item in old_items:
            if id(item) not in current:
                base.detach(item, recorder)
        for i, item in enumerate(list.__iter__(self)):
            base.attach(item, self, i)
        if recorder is not None:
            op = None
            if path is not None:
                prior = [base.snapshot(x) for x in old_items]
                op = Op(op="set", path=path, value=base.snapshot(self), prior=prior)
            recorder.push(op, base.undo_list_rewrite, self, old_items)

    def clear(self) -> None:
        self._rewrite(lambda: list.clear(self))

    def sort(self, *, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        self._rewrite(lambda: list.sort(self, key=key, reverse=reverse))

    def reverse(self) -> None:
        self._rewrite(lambda: list.reverse(self))

    def __imul__(self, n: SupportsIndex) -> TrackedList:
        plain = [base.snapshot(x) for x in list.__iter__(self)]
        self._rewrite(lambda: list.__setitem__(self, slice(None), plain * n.__index__()))
        return self


base.FACTORIES[list] = TrackedList._make
