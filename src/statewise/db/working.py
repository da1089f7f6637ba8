"""A session's state as one transaction holds it: the merged tracked tree, the versions
it is based on, and the op log of what changed since the last commit."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statewise.db.planning import TEMP_PREFIX, TTL_KEY, SessionSpec
from statewise.db.records import ScopeKey, SessionRecord
from statewise.exceptions import StateError
from statewise.state.ops import Op
from statewise.state.reserved import is_reserved
from statewise.state.tracked import Recorder, TrackedDict, to_plain


@dataclass(kw_only=True, slots=True)
class ScopeSizes:
    snapshot_bytes: int = 0
    tail_bytes: int = 0


@dataclass(kw_only=True)
class WorkingState:
    """A session's state checked out for one run (or one API call).

    Every change is logged by `recorder`; `mark(source)` only notes where one source's
    changes end, so nothing loses its undo record before it is committed.
    """

    spec: SessionSpec
    record: SessionRecord | None
    versions: dict[ScopeKey, int]
    root: TrackedDict
    recorder: Recorder
    sizes: dict[ScopeKey, ScopeSizes] = field(default_factory=dict)
    marks: list[tuple[str, int]] = field(default_factory=list)
    clean: int = 0  # the recorder savepoint of the last commit (or checkout)
    # A state assumed new, nothing read (`StateStore.begin` with `initialize`): what
    # `initialize` made of it until its first commit finds out (None: what is stored).
    assumed_new: Callable[[WorkingState], None] | None = None

    @property
    def is_new(self) -> bool:
        """True until the session exists in the database."""
        return self.record is None

    @property
    def is_fresh(self) -> bool:
        """True while the session has nothing yet: not created, or created empty (no
        event, no state of its own). Default state applies to a fresh session."""
        if self.record is None:
            return True
        own = self.versions.get(ScopeKey("session", self.spec.session_id), 0)
        return self.record.last_seq == 0 and own == 0

    def mark(self, source: str) -> None:
        """Attribute every change since the previous mark to `source`."""
        end = len(self.recorder.ops)
        if end > (self.marks[-1][1] if self.marks else 0):
            self.marks.append((source, end))

    def rollback_to(self, savepoint: int) -> None:
        """Undo every change after `savepoint`. A savepoint taken before a commit (a team
        member committed inside a leader's tool call) undoes back to that commit: what
        was committed stays."""
        self.recorder.rollback(max(savepoint, self.clean))
        end = len(self.recorder.ops)
        while self.marks and self.marks[-1][1] > end:
            self.marks.pop()

    def discard_uncommitted(self) -> None:
        """Undo everything not yet committed (a run failed between commit points)."""
        self.recorder.rollback(self.clean)
        self.marks.clear()

    @property
    def has_changes(self) -> bool:
        return bool(self.recorder.ops)

    def plain(self) -> dict[str, Any]:
        """The merged state as a plain dict, without `temp:` keys and TTL bookkeeping."""
        return visible_state(self.root)

    def take_segments(self, source: str) -> list[tuple[str, list[Op]]]:
        """Drain the pending ops as (source, ops) segments; unmarked ones go to `source`."""
        recorder = self.recorder
        if not recorder.ops:  # (a run's start and end commits, mostly: nothing to split)
            recorder.drain()
            self.clean = recorder.savepoint()
            self.marks.clear()
            return []
        self.mark(source)
        ops = self.recorder.drain()
        self.clean = self.recorder.savepoint()
        segments, start = [], 0
        for name, end in self.marks:
            if end > start:
                segments.append((name, ops[start:end]))
            start = end
        self.marks.clear()
        return segments


def visible_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """What users see of a state: no `temp:` keys, no engine bookkeeping (`__ttl__`)."""
    return {
        k: to_plain(v)
        for k, v in state.items()
        if not k.startswith(TEMP_PREFIX) and not is_reserved(k)
    }


def set_expiry(root: TrackedDict, key: str, ttl: float) -> None:
    """Make `key` vanish `ttl` seconds from now (recorded like any other write)."""
    if not ttl > 0 or ttl == float("inf"):
        raise StateError(f"ttl must be a positive number of seconds, got {ttl}")
    with root.engine_writes():
        expiries = root.setdefault(TTL_KEY, {})
        expiries[key] = time.time() + ttl


def clear_expiry(root: TrackedDict, key: str) -> None:
    """Forget `key`'s expiry time (it was set again without a ttl)."""
    expiries = root.get(TTL_KEY)
    if isinstance(expiries, dict) and key in expiries:
        with root.engine_writes():
            del expiries[key]


def expire_keys(ws: WorkingState) -> None:
    """Delete keys whose TTL passed. The deletes are ordinary recorded ops, so they are
    committed with the next commit and every reader hides the key meanwhile."""
    expiries = ws.root.get(TTL_KEY)
    if not expiries:
        return
    now = time.time()
    if not isinstance(expiries, dict):  # written by an older version: not ours to trust
        expired, broken = [], True
    else:
        expired = [k for k, at in expiries.items() if not isinstance(at, int | float) or at <= now]
        broken = False
    if not expired and not broken:
        return
    with ws.root.engine_writes():
        for key in expired:
            if isinstance(expiries[key], int | float):
                ws.root.pop(key, None)
            del expiries[key]
        if broken or not expiries:
            del ws.root[TTL_KEY]
    ws.mark("ttl_expired")
