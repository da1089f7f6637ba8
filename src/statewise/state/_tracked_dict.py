"""TrackedDict: a real dict that records its mutations (see `statewise.state.tracked`)."""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from contextlib import contextmanager
from typing import Any

from statewise.exceptions import StateOpError, StateSerializationError
from statewise.state import _tracked_base as base
from statewise.state.jsonvalue import check_key, copy_json, format_path, to_json_value
from statewise.state.ops import MISSING, Op
from statewise.state.recorder import Recorder
from statewise.state.reserved import is_reserved


def _check_key(key: Any, path: Any) -> None:
    if type(key) is not str:
        raise StateSerializationError(
            f"{format_path(path or ())}: key {key!r} of type {type(key).__name__!r} "
            "is not a string (JSON object keys must be str)"
        )
    if not key.isascii():
        check_key(key, (*(path or ()), key))


class TrackedDict(base.Node, dict[str, Any]):
    """A dict in a state tree; every write is converted to JSON and recorded as an Op."""

    __slots__ = ("_clean", "_key", "_parent", "_recorder", "_root")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        self._init_node(None, None)

    @classmethod
    def _make(cls, data: dict[str, Any], parent: base.Node | None, key: Any) -> TrackedDict:
        obj = dict.__new__(cls)
        dict.update(obj, data)
        obj._init_node(parent, key)
        return obj

    def _store(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)

    def _wrap_all(self) -> None:
        """Wrap every plain child, so views and copies never hand out raw storage."""
        if not self._clean:
            for key, value in list(dict.items(self)):
                if type(value) in base.FACTORIES:
                    self._wrap(key, value)
            self._clean = True

    # --- reads --------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        return self._wrap(key, value) if type(value) in base.FACTORIES else value

    def get(self, key: str, default: Any = None) -> Any:
        value = dict.get(self, key, MISSING)
        if value is MISSING:
            return default
        return self._wrap(key, value) if type(value) in base.FACTORIES else value

    def has(self, key: str) -> bool:
        """Agno-style spelling of `key in state`."""
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[str]:
        # Overriding __iter__ makes dict(x) and {**x} go through __getitem__ (no raw leaks).
        return dict.__iter__(self)

    def values(self) -> ValuesView[Any]:  # type: ignore[override]
        self._wrap_all()
        return dict.values(self)

    def items(self) -> ItemsView[str, Any]:  # type: ignore[override]
        self._wrap_all()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        """A shallow plain dict whose container values are still tracked (like dict.copy)."""
        self._wrap_all()
        return dict(dict.items(self))

    __copy__ = copy

    def __or__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        if not isinstance(other, Mapping):
            return NotImplemented
        new = self.copy()
        new.update(other)
        return new

    def __ror__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        if not isinstance(other, Mapping):
            return NotImplemented
        new = dict(other)
        new.update(self.copy())
        return new

    def get_all(self) -> dict[str, Any]:
        """A deep plain copy of this dict (safe to mutate, never recorded)."""
        return copy_json(self)  # type: ignore[no-any-return]

    # --- writes -------------------------------------------------------------------------

    def _assign(self, key: str, value: Any, recorder: Recorder | None, path: Any) -> None:
        """Store an already-converted value and record a `set` op with its undo."""
        old = dict.get(self, key, MISSING)
        stored = base.adopt(value, self, key)
        dict.__setitem__(self, key, stored)
        base.detach(old, recorder)
        if recorder is not None:
            op = None
            if path is not None:
                op = Op(op="set", path=(*path, key), value=value, prior=base.snapshot(old))
            recorder.push(op, base.undo_dict, self, key, old, stored)

    def __setitem__(self, key: str, value: Any) -> None:
        recorder, path = self._context()
        _check_key(key, path)
        converted = to_json_value(value, (*(path or ()), key))
        self._assign(key, converted, recorder, path)

    def set(self, key: str, value: Any) -> None:
        """Agno-style spelling of `state[key] = value`."""
        self[key] = value

    def _remove(self, key: str) -> Any:
        old = dict.pop(self, key)
        recorder, path = self._context()
        base.detach(old, recorder)
        if recorder is not None:
            op = None
            if path is not None:
                op = Op(op="delete", path=(*path, key), prior=base.snapshot(old))
            recorder.push(op, base.undo_dict, self, key, old, MISSING)
        return old

    def __delitem__(self, key: str) -> None:
        self._remove(key)

    def delete(self, key: str) -> None:
        """Delete `key`; a missing key is not an error."""
        if dict.__contains__(self, key):
            self._remove(key)

    def pop(self, key: str, *default: Any) -> Any:
        if not dict.__contains__(self, key):
            if default:
                return default[0]
            raise KeyError(key)
        return self._detached_view(self._remove(key))

    def popitem(self) -> tuple[str, Any]:
        if not dict.__len__(self):
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def _detached_view(self, old: Any) -> Any:
        """Popped plain containers are handed out wrapped, so the user never owns the
        object that recorded ops and undo entries share."""
        factory = base.FACTORIES.get(type(old))
        return old if factory is None else factory(old, None, None)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        """`dict.update(mapping_or_pairs, **kw)`, or the `update(key, dict)` form which
        merges `dict` into the dict stored at `key`. Converts every value before writing,
        so a bad value changes nothing."""
        if len(args) == 2 and isinstance(args[0], str) and not kwargs:
            key, value = args
            if not isinstance(value, Mapping):
                raise StateOpError(f"update({key!r}, ...) needs a mapping, got {value!r}")
            if not dict.__contains__(self, key):
                self[key] = {}
            target = self[key]
            if not isinstance(target, TrackedDict):
                _, path = self._context()
                raise StateOpError(
                    f"cannot update {format_path((*(path or ()), key))}: it is a "
                    f"{type(target).__name__}, not a dict"
                )
            target.update(value)
            return
        if len(args) > 1:
            raise TypeError(f"update expected at most 1 positional argument, got {len(args)}")
        pairs: Iterable[Any] = ()
        if args:
            source = args[0]
            if isinstance(source, Mapping):
                pairs = [(k, source[k]) for k in source]
            elif hasattr(source, "keys"):
                pairs = [(k, source[k]) for k in source.keys()]  # noqa: SIM118 (keys() protocol)
            else:
                pairs = list(source)
        pairs = [*pairs, *kwargs.items()]
        recorder, path = self._context()
        converted = []
        for k, v in pairs:
            _check_key(k, path)
            converted.append((k, to_json_value(v, (*(path or ()), k))))
        for k, v in converted:
            self._assign(k, v, recorder, path)

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[override]
        self.update(other)
        return self

    def clear(self) -> None:
        # Deleting from the end means a rollback re-inserts the keys in their old order.
        # The root keeps the engine's reserved keys (`__ttl__`, ...): they are not the
        # caller's to clear, and the engine tidies them itself.
        for key in reversed(list(dict.keys(self))):
            if not (self._root and is_reserved(key)):
                self._remove(key)

    def increment(self, key: str, amount: int | float = 1) -> int | float:
        """Add `amount` to the number at `key` (missing counts as 0) as a mergeable op."""
        recorder, path = self._context()
        full = (*(path or ()), key)
        if not base.is_number(amount):
            raise StateOpError(f"cannot increment {format_path(full)} by {amount!r}")
        old = dict.get(self, key, MISSING)
        current = 0 if old is MISSING else old
        if not base.is_number(current):
            raise StateOpError(
                f"cannot increment {format_path(full)}: it is a "
                f"{type(current).__name__}, not a number"
            )
        new = current + amount
        to_json_value(new, full)  # an overflow to infinity or past the int limit raises
        dict.__setitem__(self, key, new)
        if recorder is not None:
            op = None
            if path is not None:
                op = Op(op="increment", path=full, value=amount, prior=old)
            recorder.push(op, base.undo_dict, self, key, old, new)
        return new

    # --- root-only ------------------------------------------------------------------------

    def _require_root(self, what: str) -> None:
        if not self._root:
            raise StateOpError(f"{what} is only allowed on the root of a state tree")

    @contextmanager
    def engine_writes(self) -> Iterator[None]:
        """Let the engine write reserved keys (`__ttl__`, ...) within this block."""
        self._require_root("engine_writes")
        if self._recorder is None:
            yield
            return
        with self._recorder.engine():
            yield

    def set_recorder(self, recorder: Recorder | None) -> None:
        """Swap the recorder (one per run) on the root."""
        self._require_root("set_recorder")
        self._recorder = recorder

    def replace_contents(self, data: Mapping[str, Any]) -> None:
        """Replace everything without recording (after a reload or rebase).

        The root keeps its identity; old children are detached, and the tracked children
        `data` puts back (a reload keeps the scopes that did not move) are attached again:
        left detached, their later writes changed the tree but recorded nothing, and were
        never committed. Takes ownership of the nested values in `data`: pass a copy if
        you keep mutating yours.
        """
        self._require_root("replace_contents")
        for value in dict.values(self):
            base.detach(value, None)
        dict.clear(self)
        dict.update(self, data)
        for key, value in dict.items(self):
            if isinstance(value, base.Node):
                base.attach(value, self, key)
        self._clean = False


def track(data: dict[str, Any], recorder: Recorder) -> TrackedDict:
    """Make the root of a state tree over `data` (its nested values are taken over, not
    copied: do not mutate them behind the root's back)."""
    root = TrackedDict._make(data, None, None)
    root._root = True
    root._recorder = recorder
    return root


base.FACTORIES[dict] = TrackedDict._make
