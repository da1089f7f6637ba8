"""RFC 6902 JSON Patch from recorded ops: what a frontend applies to stay in sync.

A frontend holds a copy of the state (a snapshot) and keeps it current by applying JSON
Patch documents. `PatchMirror` keeps the same copy on the server and turns each recorded
op into the patch operations that make the same change: `append` becomes
`add /items/-`, `increment` a `replace`, `delete` a `remove`, and so on. It never
compares whole states: each op costs what it changed (plus the walk to its path).

The mirror can hide keys (`__ttl__` bookkeeping, `temp:` keys) and redact secret keys:
a secret key's value is always shown as "***", so its patch only says whether the key is
there. Applying every patch in order to the first snapshot gives exactly the mirror's
document, which is the stored state as a reader sees it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from statewise.exceptions import StateOpError
from statewise.state.jsonvalue import Path, copy_json
from statewise.state.ops import MISSING, Op, apply_op
from statewise.state.secrets import REDACTED

__all__ = ["REDACTED", "PatchMirror", "pointer"]

PatchOp = dict[str, Any]


def pointer(path: Iterable[str | int]) -> str:
    """A JSON Pointer (RFC 6901): `("a", "b/c", 0)` -> `/a/b~1c/0`."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _child(node: Any, key: str | int) -> Any:
    if isinstance(node, dict) and isinstance(key, str):
        return node.get(key, MISSING)
    if isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
        return node[key]
    return MISSING


class PatchMirror:
    """A plain copy of a state that turns ops into JSON Patch as it applies them.

    `doc` is what the frontend has (start it from `snapshot()`); `hidden(key)` says which
    top-level keys the frontend never sees; `secret_keys` are shown as "***".
    """

    def __init__(
        self,
        state: dict[str, Any],
        *,
        secret_keys: Iterable[str] = (),
        hidden: Callable[[str], bool] = lambda key: False,
    ) -> None:
        self.secret_keys = frozenset(secret_keys)
        self.hidden = hidden
        self.doc: dict[str, Any] = {
            key: REDACTED if key in self.secret_keys else copy_json(value)
            for key, value in state.items()
            if not hidden(key)
        }

    def snapshot(self) -> dict[str, Any]:
        """A copy of the document as the frontend should have it now."""
        return copy_json(self.doc)  # type: ignore[no-any-return]

    def apply(self, ops: Iterable[Op]) -> list[PatchOp]:
        """Apply `ops` to the document; return the patch that makes the same change.

        Raises StateOpError when an op does not apply to the document (the document is
        not the state the ops were recorded on); the caller should send a snapshot then.
        """
        patch: list[PatchOp] = []
        for op in ops:
            key = op.path[0]
            if not isinstance(key, str) or self.hidden(key):
                continue
            if key in self.secret_keys:
                patch.extend(self._secret(op, key))
            else:
                patch.extend(self._op(op))
        return patch

    # ---- one op ----------------------------------------------------------------------------

    def _secret(self, op: Op, key: str) -> list[PatchOp]:
        present = key in self.doc
        if op.op == "remove" or (op.op == "delete" and len(op.path) > 1):
            return []  # these never create the key; a change inside it shows as nothing
        if op.op == "delete":
            if not present:
                return []
            del self.doc[key]
            return [{"op": "remove", "path": pointer([key])}]
        if present:
            return []
        self.doc[key] = REDACTED
        return [{"op": "add", "path": pointer([key]), "value": REDACTED}]

    def _missing_ancestor(self, path: Path) -> int | None:
        """How many path parts lead to the first absent node (None: all present)."""
        node: Any = self.doc
        for depth, key in enumerate(path):
            node = _child(node, key)
            if node is MISSING:
                return depth + 1
        return None

    def _created(self, op: Op, upto: int) -> list[PatchOp]:
        """An op that creates containers on its way: one `add` of the new subtree."""
        apply_op(self.doc, op)
        at = op.path[:upto]
        node: Any = self.doc
        for key in at[:-1]:
            node = _child(node, key)
        last = at[-1]
        if isinstance(node, list):
            # apply_op only creates dict entries; a missing list slot means the op failed.
            raise StateOpError(f"cannot patch {pointer(op.path)}: index out of range")
        return [{"op": "add", "path": pointer(at), "value": copy_json(node[last])}]

    def _normalized(self, op: Op) -> Op:
        """The op with negative list indexes on its path made positive (JSON Pointer has
        no negative indexes)."""
        node: Any = self.doc
        parts = list(op.path)
        for depth, key in enumerate(parts):
            if isinstance(node, list) and isinstance(key, int) and -len(node) <= key < 0:
                parts[depth] = key + len(node)
            node = _child(node, key)
            if node is MISSING:
                break
        if parts == list(op.path):
            return op
        return Op(op=op.op, path=tuple(parts), value=op.value, index=op.index, prior=op.prior)

    def _op(self, op: Op) -> list[PatchOp]:
        op = self._normalized(op)
        kind, path = op.op, op.path
        missing = self._missing_ancestor(path)
        if kind == "delete":
            return self._delete(path, missing)
        if kind == "remove":
            return self._remove(op, missing)
        if missing is not None and (kind != "set" or missing < len(path)):
            # The op creates containers on its way (or its list / number itself).
            return self._created(op, missing)
        if kind == "set":
            return self._set(op, missing)
        target = self._get(path)
        if kind == "increment":
            apply_op(self.doc, op)
            return [{"op": "replace", "path": pointer(path), "value": self._get(path)}]
        if not isinstance(target, list):
            apply_op(self.doc, op)  # raises the same StateOpError the store would
            raise StateOpError(f"cannot patch {pointer(path)}: not a list")  # pragma: no cover
        if kind == "append":
            apply_op(self.doc, op)
            return [{"op": "add", "path": pointer([*path, "-"]), "value": copy_json(op.value)}]
        if kind == "extend":
            apply_op(self.doc, op)
            return [
                {"op": "add", "path": pointer([*path, "-"]), "value": copy_json(v)}
                for v in op.value
            ]
        if kind == "insert":
            n = len(target)
            i = op.index if op.index is not None else n
            i = max(0, i + n) if i < 0 else min(i, n)
            apply_op(self.doc, op)
            return [{"op": "add", "path": pointer([*path, i]), "value": copy_json(op.value)}]
        raise StateOpError(f"unknown op {kind!r}")

    def _get(self, path: Path) -> Any:
        node: Any = self.doc
        for key in path:
            node = _child(node, key)
        return node

    def _set(self, op: Op, missing: int | None) -> list[PatchOp]:
        path = op.path
        parent = self._get(path[:-1])
        apply_op(self.doc, op)
        if isinstance(parent, list):
            return [{"op": "replace", "path": pointer(path), "value": copy_json(op.value)}]
        verb = "add" if missing is not None else "replace"
        return [{"op": verb, "path": pointer(path), "value": copy_json(op.value)}]

    def _delete(self, path: Path, missing: int | None) -> list[PatchOp]:
        if missing is not None:
            return []
        apply_op(self.doc, Op(op="delete", path=path))
        return [{"op": "remove", "path": pointer(path)}]

    def _remove(self, op: Op, missing: int | None) -> list[PatchOp]:
        if missing is not None:
            return []
        target = self._get(op.path)
        if not isinstance(target, list):
            apply_op(self.doc, op)  # raises the store's StateOpError
            return []  # pragma: no cover
        # The same choice apply_op makes: the item at `index` if it still holds the value,
        # else the first equal item, else nothing.
        i = op.index
        if i is None or not (0 <= i < len(target) and target[i] == op.value):
            i = None
            with contextlib.suppress(ValueError):
                i = target.index(op.value)
        if i is None:
            return []
        del target[i]
        return [{"op": "remove", "path": pointer([*op.path, i])}]
