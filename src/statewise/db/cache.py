"""Checked-in session trees, by session id: a bounded LRU shared by one database, so an
unchanged session is neither re-read nor re-parsed by its next run.

Bounded by bytes as well as by count: a tree weighs what its scopes take in storage (their
snapshot and the deltas since, as stored JSON; a parsed tree takes several times that in
memory). Past `STATEWISE_CACHE_MB` megabytes of it (default 64) the least recently used
trees go, so a process serving big states holds a bounded amount of them, whatever their
size; a tree bigger than the whole budget is not kept at all.

Beside them, the tree a reader outside a run last read of a session (plain, never changed
once kept): a run takes its session's tree out of the cache for the whole run, so a reader
polling a busy session would otherwise load every scope at each read. With this, a read
loads only the scopes that moved since the last one (`BaseDb.read_scopes`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statewise.db.base import BaseDb
from statewise.db.planning import scope_of
from statewise.db.records import ScopeKey
from statewise.exceptions import ConfigurationError
from statewise.state.tracked import to_plain

if TYPE_CHECKING:
    from statewise.db.planning import SessionSpec
    from statewise.db.working import WorkingState

CACHE_SIZE = 512
CACHE_MB = 64
READS_SIZE = 64


def cache_bytes() -> int:
    """The byte budget of a cache made now (`STATEWISE_CACHE_MB`, default 64)."""
    raw = os.environ.get("STATEWISE_CACHE_MB", "").strip()
    try:
        megabytes = float(raw) if raw else CACHE_MB
    except ValueError:
        raise ConfigurationError(f"STATEWISE_CACHE_MB={raw!r} is not a number") from None
    return max(0, int(megabytes * 1024 * 1024))


def weight(ws: WorkingState) -> int:
    """What a checked-in tree weighs: its scopes' stored JSON (snapshot and deltas since)."""
    return sum(s.snapshot_bytes + s.tail_bytes for s in ws.sizes.values())


@dataclass(frozen=True, slots=True)
class _Read:
    spec: SessionSpec
    versions: dict[ScopeKey, int]
    tree: dict[str, Any]


class SessionCache:
    def __init__(self, max_bytes: int | None = None, max_sessions: int = CACHE_SIZE) -> None:
        self.max_bytes = cache_bytes() if max_bytes is None else max_bytes
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, WorkingState] = OrderedDict()
        self._weights: dict[str, int] = {}
        self.bytes = 0  # the weight of the trees held now
        self._reads: OrderedDict[str, _Read] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, session_id: str) -> WorkingState | None:
        with self._lock:
            return self._pop(session_id)

    def give(self, ws: WorkingState) -> None:
        sid = ws.spec.session_id
        heavy = weight(ws)
        with self._lock:
            current = self._entries.get(sid)
            if current is not None and sum(current.versions.values()) > sum(ws.versions.values()):
                return
            self._pop(sid)
            if heavy > self.max_bytes:
                return  # it alone would push every other tree out
            self._entries[sid] = ws
            self._weights[sid] = heavy
            self.bytes += heavy
            while len(self._entries) > self.max_sessions or self.bytes > self.max_bytes:
                self._pop(next(iter(self._entries)))

    def _pop(self, session_id: str) -> WorkingState | None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self.bytes -= self._weights.pop(session_id)
        return entry

    def plain_if_current(
        self, session_id: str, versions: Mapping[ScopeKey, int]
    ) -> dict[str, Any] | None:
        """A copy of the cached state if it is exactly at `versions` (copied under the lock,
        so no run can take and change it meanwhile)."""
        with self._lock:
            entry = self._current(session_id, versions)
            return None if entry is None else entry.plain()

    def spec_of(self, session_id: str) -> SessionSpec | None:
        """Whose the cached tree (or the last read one) is: its owner's scopes, so a
        reader can read exactly those scopes."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is not None:
                return entry.spec
            read = self._reads.get(session_id)
            return None if read is None else read.spec

    def held_versions(self, session_id: str) -> dict[ScopeKey, int]:
        """The scope versions of the newer of the cached tree and the last read one:
        what a reader need not load again (see `read_tree`)."""
        held: dict[ScopeKey, int] = {}
        with self._lock:
            for found in (self._entries.get(session_id), self._reads.get(session_id)):
                if found is not None and sum(found.versions.values()) > sum(held.values()):
                    held = dict(found.versions)
        return held

    def read_tree(self, session_id: str, versions: Mapping[ScopeKey, int]) -> dict[str, Any] | None:
        """The keys of exactly these scopes at exactly these versions, plain, from the last
        read tree or a copy of the cached one; None when neither is at them (a run moved
        them meanwhile). The values are shared with the kept tree: copy before changing."""
        if not versions:
            return {}
        kinds = {key.kind for key in versions}
        with self._lock:
            read = self._reads.get(session_id)
            if read is not None and all(read.versions.get(k) == v for k, v in versions.items()):
                return {k: v for k, v in read.tree.items() if scope_of(k)[0] in kinds}
            entry = self._current(session_id, versions)
            if entry is None:
                return None
            return {k: to_plain(v) for k, v in dict.items(entry.root) if scope_of(k)[0] in kinds}

    def keep_read(
        self, spec: SessionSpec, versions: Mapping[ScopeKey, int], tree: dict[str, Any]
    ) -> None:
        """Keep a read tree (plain; nobody may change it from now on) for the next reader,
        unless a newer one is kept already."""
        sid = spec.session_id
        with self._lock:
            current = self._reads.get(sid)
            if current is not None and sum(current.versions.values()) > sum(versions.values()):
                return
            self._reads[sid] = _Read(spec, dict(versions), tree)
            self._reads.move_to_end(sid)
            while len(self._reads) > READS_SIZE:
                self._reads.popitem(last=False)

    def _current(self, session_id: str, versions: Mapping[ScopeKey, int]) -> WorkingState | None:
        entry = self._entries.get(session_id)
        if entry is None or any(entry.versions.get(k) != v for k, v in versions.items()):
            return None
        return entry

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._pop(session_id)
            self._reads.pop(session_id, None)


def cache_for(db: BaseDb) -> SessionCache:
    cache: SessionCache | None = getattr(db, "_statewise_cache", None)
    if cache is None:
        cache = SessionCache()
        db._statewise_cache = cache  # type: ignore[attr-defined]
    return cache
