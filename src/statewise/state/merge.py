"""Three-way rebase of one writer's ops onto state that moved under it.

When a commit loses its compare-and-swap, the storage layer calls `rebase` with the latest
stored state (which already contains `theirs`, the ops other writers committed since our
base version) and re-applies `ours`. Commuting ops apply as they are; a set/delete whose
path overlaps what theirs touched is resolved by the path's rule and always recorded as a
`Conflict`: never a silent loss. That includes both sides writing the *same* value: from
one base, two `n += 1` both write `base + 1`, and keeping one of them loses an increment,
so it is a conflict like any other (`strict` raises, `last_write_wins` records it).

List ops rebase by position against the ops other writers applied to the same list:

- `insert(i, x)`: `i` is shifted past every element theirs inserted at or before `i` (an
  insert at the same index as theirs goes after theirs) and back by every element
  theirs removed before `i`; an index past the end appends.
- `remove(x)` of the element at index `i`: the same shift finds where that element is now;
  if it is no longer there (theirs removed it too), nothing more is removed rather than
  another element equal to `x`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise.exceptions import StateConflictError, StateOpError
from statewise.state.jsonvalue import Path, copy_json, format_path, to_json_value
from statewise.state.ops import MISSING, Op, apply_op
from statewise.state.reducers import Rule, resolve_rule, rule_name

__all__ = ["Conflict", "RebaseResult", "Rules", "rebase"]


class Rules:
    """Merge rules by top-level key or dotted path; the most specific prefix wins."""

    __slots__ = ("_default", "_rules")

    def __init__(
        self, mapping: Mapping[str, Rule] | None = None, *, default: Rule = "last_write_wins"
    ) -> None:
        self._rules: dict[tuple[str, ...], Rule] = {
            tuple(key.split(".")): resolve_rule(rule) for key, rule in (mapping or {}).items()
        }
        self._default: Rule = resolve_rule(default)

    def rule_for(self, path: Path) -> Rule:
        if self._rules:
            parts = tuple(str(p) for p in path)
            for n in range(len(parts), 0, -1):
                rule = self._rules.get(parts[:n])
                if rule is not None:
                    return rule
        return self._default

    @property
    def default(self) -> Rule:
        """The rule of every path no entry names (`last_write_wins` unless set)."""
        return self._default

    def merged(self, other: Rules | Mapping[str, Rule] | None) -> Rules:
        """A new Rules with `other`'s entries overriding ours."""
        new = Rules(default=self._default)
        new._rules = dict(self._rules)
        new._rules.update(other._rules if isinstance(other, Rules) else Rules(other)._rules)
        return new

    def __repr__(self) -> str:
        return f"Rules({ {'.'.join(k): rule_name(v) for k, v in self._rules.items()} })"


@dataclass(kw_only=True)
class Conflict:
    """A path both sides wrote: what each wanted and what was kept (MISSING = absent)."""

    path: Path
    base: Any
    theirs: Any
    ours: Any
    resolved: Any
    rule: str

    def to_json(self) -> dict[str, Any]:
        """JSON form; values that were absent (MISSING) are left out."""
        data: dict[str, Any] = {"path": list(self.path), "rule": self.rule}
        for name in ("base", "theirs", "ours", "resolved"):
            value = getattr(self, name)
            if value is not MISSING:
                data[name] = value
        return data


@dataclass(kw_only=True)
class RebaseResult:
    ops: list[Op] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)


def _get(doc: Any, path: Path) -> Any:
    node = doc
    for key in path:
        if isinstance(node, dict) and isinstance(key, str):
            node = node.get(key, MISSING)
        elif isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
            node = node[key]
        else:
            return MISSING
        if node is MISSING:
            return MISSING
    return node


def _json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values, key order aside: 1, 1.0 and True differ, as their texts do."""
    if a is b:
        return True
    if a != b:  # (the common answer, from one deep compare in C)
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return all(map(_json_equal, a, b))
    return type(a) is type(b)


def _force_set(doc: dict[str, Any], path: Path, value: Any) -> bool:
    """Set `path`, replacing whatever blocks it with dicts (LWW recreates). False when a
    list index on the way no longer exists."""
    node: Any = doc
    for depth, key in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(node, list):
            if not isinstance(key, int) or not -len(node) <= key < len(node):
                return False
        elif not isinstance(key, str):
            return False
        if last:
            node[key] = value
            return True
        child = node.get(key) if isinstance(node, dict) else node[key]
        if not isinstance(child, dict | list) or (
            isinstance(child, list) and not isinstance(path[depth + 1], int)
        ):
            node[key] = {}
            child = node[key]  # (a tracked tree stores its own tracked copy)
        node = child
    return False  # pragma: no cover - path is never empty


def _recreated(op: Op) -> Any:
    """What an op that no longer applies means as a plain value at its path."""
    if op.op in ("append", "insert"):
        return [op.value]
    if op.op == "extend":
        return list(op.value)
    if op.op == "increment":
        return op.value
    return op.value if op.op == "set" else MISSING


_LIST_OPS = ("insert", "append", "extend", "remove")
_DROP = object()


class _Positions:
    """Where the elements of one list are, in our coordinates (base + our ops) and in the
    document's (base + theirs + our ops): each element is a label, so an index of ours
    maps to the same element in the document, wherever theirs moved it.

    While theirs only appended and so did we, the labels are not made: base element `i`
    is at `i` on both sides and ours follow theirs, so a rebase of appends onto appends
    costs the same for a list of 100,000 items as for one of 10. The first insert or
    remove of ours makes them."""

    def __init__(self, size: int, theirs: Sequence[Op]) -> None:
        added = sum(
            1 if t.op in ("insert", "append") else len(t.value) if t.op == "extend" else -1
            for t in theirs
        )
        self.base = size - added
        if self.base < 0:
            raise ValueError("their ops do not add up")
        self.theirs = theirs
        self.added = added  # by theirs, at the end, while `ours` is None
        self.appended = 0  # by us, at the end, while `ours` is None
        self.ours: list[object] | None = None
        self.doc: list[object] = []
        if any(t.op not in ("append", "extend") for t in theirs):
            self._label(size)

    def _label(self, size: int) -> tuple[list[object], list[object]]:
        ours: list[object] = [("base", k) for k in range(self.base)]
        doc = list(ours)
        for t in self.theirs:
            if t.op == "remove":
                if t.index is None or not 0 <= t.index < len(doc):
                    raise ValueError("their remove has no position")
                del doc[t.index]
            elif t.op == "insert":
                index = len(doc) if t.index is None else min(t.index, len(doc))
                doc.insert(index, object())
            else:
                count = 1 if t.op == "append" else len(t.value)
                doc.extend(object() for _ in range(count))
        if len(doc) != size:
            raise ValueError("their ops do not add up")
        for _ in range(self.appended):
            label = object()
            ours.append(label)
            doc.append(label)
        self.ours, self.doc = ours, doc
        return ours, doc

    def labels(self) -> tuple[list[object], list[object]]:
        if self.ours is None:
            return self._label(self.base + self.added)
        return self.ours, self.doc

    def size(self) -> int:
        """How many elements the list has in our coordinates."""
        return self.base + self.appended if self.ours is None else len(self.ours)

    def doc_index(self, ours: int) -> int | None:
        """The document index of our element at `ours` (None: theirs removed it)."""
        if self.ours is None:
            return ours if ours < self.base else ours + self.added
        label = self.ours[ours]
        return self.doc.index(label) if label in self.doc else None

    def insert(self, ours: int) -> int:
        """Our insert before our element `ours` (or at the end): its document index. An
        insert where theirs inserted too goes after theirs."""
        mine, doc = self.labels()
        label = object()
        at = len(doc)
        for anchor in mine[ours:]:
            if anchor in doc:
                at = doc.index(anchor)
                break
        mine.insert(ours, label)
        doc.insert(at, label)
        return at

    def append(self, count: int) -> None:
        if self.ours is None:
            self.appended += count
            return
        for _ in range(count):
            label = object()
            self.ours.append(label)
            self.doc.append(label)

    def remove(self, ours: int) -> int | None:
        at = self.doc_index(ours)
        mine, doc = self.labels()
        label = mine.pop(ours)
        if at is not None:
            doc.remove(label)
        return at


class _Rebase:
    def __init__(self, latest: dict[str, Any], theirs: Sequence[Op], rules: Rules) -> None:
        self.doc = latest
        self.rules = rules
        self.theirs = theirs
        self.positions: dict[Path, _Positions | None] = {}
        self.replaced: set[Path] = set()  # paths our own ops set or deleted
        self.touched = {op.path for op in theirs}
        self.touched_prefixes = {op.path[:n] for op in theirs for n in range(1, len(op.path))}
        self.claimed: set[Path] = set()  # paths ours already won (later ops there apply)
        self.result = RebaseResult()

    def overlaps(self, path: Path) -> bool:
        if any(path[:n] in self.claimed for n in range(1, len(path) + 1)):
            return False
        if path in self.touched_prefixes:
            return True
        return any(path[:n] in self.touched for n in range(1, len(path) + 1))

    def list_positions(self, path: Path) -> _Positions | None:
        """Positions of the list at `path` when theirs only moved its elements (inserts,
        appends, removes); None when theirs replaced it (or it is not a list)."""
        if path in self.positions:
            return self.positions[path]
        found: _Positions | None = None
        mine = [t for t in self.theirs if t.path == path]
        replaced = any(t.op not in _LIST_OPS for t in mine) or any(
            t.path == path[:n] and t.op in ("set", "delete")
            for t in self.theirs
            for n in range(1, len(path))
        )
        replaced = replaced or any(path[:n] in self.replaced for n in range(1, len(path) + 1))
        current = _get(self.doc, path)
        if mine and not replaced and isinstance(current, list):
            try:
                found = _Positions(len(current), mine)
            except ValueError:
                found = None
        self.positions[path] = found
        return found

    def map_list(self, op: Op) -> Op | object | None:
        """Our op moved to where its element is now: a list op on a list theirs also
        changed, or a write into one of its elements. `_DROP` when the element is gone
        (both sides removed it); None when positions are not tracked."""
        if op.op in _LIST_OPS:
            where = self.list_positions(op.path)
            if where is None:
                return None
            if op.op in ("append", "extend"):
                where.append(1 if op.op == "append" else len(op.value))
                return op
            index = op.index
            if index is None or not 0 <= index <= where.size():
                return None
            if op.op == "insert":
                return Op(op="insert", path=op.path, value=op.value, index=where.insert(index))
            if index == where.size():
                return None
            removed_at = where.remove(index)
            if removed_at is None:
                return _DROP
            return Op(op="remove", path=op.path, value=op.value, index=removed_at)
        for n in range(1, len(op.path)):
            key = op.path[n]
            if isinstance(key, int) and not isinstance(key, bool):
                where = self.list_positions(op.path[:n])
                if where is None or not 0 <= key < where.size():
                    continue
                element = where.doc_index(key)
                if element is None:
                    return None
                path = (*op.path[:n], element, *op.path[n + 1 :])
                return Op(op=op.op, path=path, value=op.value, index=op.index, prior=op.prior)
        return None

    def apply(self, op: Op) -> None:
        if self.creates_existing(op):
            return
        mapped = self.map_list(op)
        if mapped is _DROP:
            return
        if isinstance(mapped, Op):
            if mapped.op in _LIST_OPS:
                apply_op(self.doc, mapped)
                self.result.ops.append(mapped)
                return
            op = mapped
        if op.op in ("set", "delete"):
            self.replaced.add(op.path)
        if op.op in ("set", "delete") and self.overlaps(op.path):
            ours = op.value if op.op == "set" else MISSING
            self.resolve(op.path, op.prior, ours, forced=False)
            return
        try:
            apply_op(self.doc, op)
        except StateOpError:
            self.resolve(op.path, op.prior if op.op == "set" else MISSING, _recreated(op), True)
            return
        self.result.ops.append(op)

    def creates_existing(self, op: Op) -> bool:
        """`state.setdefault("l", []).append(x)` on both sides: each side's set of an empty
        container over a missing key means "create it", which theirs already did."""
        if op.op != "set" or op.prior is not MISSING or op.value not in ([], {}):
            return False
        current = _get(self.doc, op.path)
        return (
            isinstance(current, list) if isinstance(op.value, list) else isinstance(current, dict)
        )

    def resolve(self, path: Path, base: Any, ours: Any, forced: bool) -> None:
        rule = self.rules.rule_for(path)
        # A plain copy: the doc may be a tracked tree, and what a rule is handed or a
        # conflict records must not change with it.
        theirs = copy_json(_get(self.doc, path))
        if isinstance(rule, str):
            if rule == "strict":
                raise StateConflictError(format_path(path), theirs, ours, key=str(path[0]))
            resolved = ours
            self.claimed.add(path)
        else:
            resolved = rule(base, theirs, ours)
            if resolved is not MISSING:
                resolved = to_json_value(resolved, path)
        # The applied op is based on the value it was rebased onto, so rebasing it again
        # (when the commit loses another race) does not count the other writers twice.
        if not self.write(path, theirs, resolved):
            resolved = theirs
        # A path both sides changed from one base is always recorded, equal values too.
        self.result.conflicts.append(
            Conflict(
                path=path,
                base=base,
                theirs=theirs,
                ours=ours,
                resolved=resolved,
                rule=rule_name(rule),
            )
        )

    def write(self, path: Path, prior: Any, value: Any) -> bool:
        if _json_equal(prior, value):
            # The document already holds it (both sides wrote the same value, say a
            # session's default state by two creators): writing it again would store
            # the whole value once more for nothing. The conflict is still recorded.
            return True
        if value is MISSING:
            op = Op(op="delete", path=path, prior=prior)
            apply_op(self.doc, op)
        else:
            op = Op(op="set", path=path, value=value, prior=prior)
            try:
                apply_op(self.doc, op)
            except StateOpError:
                if not _force_set(self.doc, path, to_json_value(value, path)):
                    return False
        self.result.ops.append(op)
        return True


def rebase(
    latest: dict[str, Any], theirs: Sequence[Op], ours: Sequence[Op], rules: Rules
) -> RebaseResult:
    """Apply `ours` onto `latest` in place (it already includes `theirs`).

    Returns the ops as actually applied (set values replaced by resolved values) and the
    conflicts. Deterministic: the same inputs always give the same state and result.
    Raises StateConflictError for a `strict` path both sides set to different values.
    """
    job = _Rebase(latest, theirs, rules)
    for op in ours:
        job.apply(op)
    return job.result
