"""Checked-in session trees, by session id: a bounded LRU shared by one database, so an
unchanged session is neither re-read nor re-parsed by its next run."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.state.tracked import to_plain

if TYPE_CHECKING:
    from statewise.db.planning import SessionSpec
    from statewise.db.working import WorkingState

CACHE_SIZE = 512


class SessionCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, WorkingState] = OrderedDict()

    def take(self, session_id: str) -> WorkingState | None:
        with self._lock:
            return self._entries.pop(session_id, None)

    def give(self, ws: WorkingState) -> None:
        with self._lock:
            current = self._entries.get(ws.spec.session_id)
            if current is not None and sum(current.versions.values()) > sum(ws.versions.values()):
                return
            self._entries[ws.spec.session_id] = ws
            self._entries.move_to_end(ws.spec.session_id)
            while len(self._entries) > CACHE_SIZE:
                self._entries.popitem(last=False)

    def plain_if_current(
        self, session_id: str, versions: Mapping[ScopeKey, int]
    ) -> dict[str, Any] | None:
        """A copy of the cached state if it is exactly at `versions` (copied under the lock,
        so no run can take and change it meanwhile)."""
        with self._lock:
            entry = self._current(session_id, versions)
            return None if entry is None else entry.plain()

    def spec_of(self, session_id: str) -> SessionSpec | None:
        """Whose the cached tree is (its owner's scopes), so a reader can probe exactly
        those scopes' versions before asking for a copy."""
        with self._lock:
            entry = self._entries.get(session_id)
            return None if entry is None else entry.spec

    def tree_if_current(
        self, session_id: str, versions: Mapping[ScopeKey, int]
    ) -> dict[str, Any] | None:
        """A plain copy of the whole cached tree, engine keys included (TTLs, the secrets
        registry), if it is exactly at `versions`. A reader copies instead of taking the
        tree: a run starting meanwhile still finds it here instead of reloading it."""
        with self._lock:
            entry = self._current(session_id, versions)
            if entry is None:
                return None
            return {k: to_plain(v) for k, v in dict.items(entry.root)}

    def _current(self, session_id: str, versions: Mapping[ScopeKey, int]) -> WorkingState | None:
        entry = self._entries.get(session_id)
        if entry is None or any(entry.versions.get(k) != v for k, v in versions.items()):
            return None
        return entry

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._entries.pop(session_id, None)


def cache_for(db: BaseDb) -> SessionCache:
    cache: SessionCache | None = getattr(db, "_statewise_cache", None)
    if cache is None:
        cache = SessionCache()
        db._statewise_cache = cache  # type: ignore[attr-defined]
    return cache
