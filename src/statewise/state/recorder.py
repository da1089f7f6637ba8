"""The op log and undo log behind a tracked state tree.

Every mutation of a tracked container pushes one undo entry (and, when the container is
attached to a root, one `Op`). Undo entries make tool atomicity O(change): a tool that
raises is rolled back by running its undo entries backwards, never by copying the state
before every tool call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from statewise.exceptions import StateOpError
from statewise.state.ops import Op
from statewise.state.reserved import is_reserved, reserved_error

__all__ = ["Recorder"]

Undo = tuple[bool, Callable[..., None], tuple[Any, ...]]


class Recorder:
    """Collects the ops of one run between commits and can roll back to a savepoint."""

    __slots__ = ("_drained", "_engine", "_undo", "ops")

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._undo: list[Undo] = []
        self._drained = 0  # undo entries forgotten by earlier drains (keeps savepoints absolute)
        self._engine = 0  # > 0 while the engine writes its reserved keys

    def push(self, op: Op | None, undo: Callable[..., None], *args: Any) -> None:
        """Record `op` (None for undo-only changes of detached containers) and its undo.

        A change to a reserved key (`__x__`) outside `engine()` is undone here and raises
        `ReservedKeyError`: the tree is as it was before the write."""
        if op is not None:
            if not self._engine and op.path and is_reserved(op.path[0]):
                undo(*args)
                raise reserved_error(str(op.path[0]))
            self.ops.append(op)
        self._undo.append((op is not None, undo, args))

    @contextmanager
    def engine(self) -> Iterator[None]:
        """Within this block, reserved keys (`__ttl__`, ...) may be written."""
        self._engine += 1
        try:
            yield
        finally:
            self._engine -= 1

    def savepoint(self) -> int:
        """A marker to `rollback` to; valid until the next `drain`."""
        return self._drained + len(self._undo)

    def rollback(self, savepoint: int) -> None:
        """Undo every mutation made after `savepoint` and drop its ops."""
        start = savepoint - self._drained
        if start < 0 or start > len(self._undo):
            raise StateOpError(
                f"savepoint {savepoint} is not valid (it predates the last drain or is unknown)"
            )
        undo = self._undo
        while len(undo) > start:
            has_op, fn, args = undo.pop()
            fn(*args)
            if has_op:
                self.ops.pop()

    def undoer(self) -> Callable[[], None]:
        """A function that undoes every change made since the last drain. Take it before
        the next `drain` and call it while the tree has not changed since: a commit that
        lost a race takes the tree back to the state its ops were made on. It holds the
        undo list itself, which `drain` hands over rather than clears: no copy per commit."""
        entries = self._undo

        def undo() -> None:
            for _has_op, fn, args in reversed(entries):
                fn(*args)

        return undo

    def drain(self) -> list[Op]:
        """Return the ops since the last drain and forget their undo info (a commit)."""
        ops, self.ops = self.ops, []
        self._drained += len(self._undo)
        self._undo = []
        return ops
