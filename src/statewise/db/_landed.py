"""The deltas this process landed lately on a database, by scope, kept as written: what its
other writers of a busy session need to catch their trees up, without reading them back
from storage.

Sixteen writers of one session in one process each hold a tree of their own (a
transaction's), and each finds it several commits behind at checkout: the others'
commits. Read back, every delta was read, parsed and decoded once per writer, sixteen
times; kept here, a checkout reads from storage only what this process did not land
(other processes' commits), and the delta's ops are decoded once (`DeltaRecord.decoded`).
A group commit's leader notes its writers' deltas as the group lands (`db._group`, whose
per-database turns hold these), before they wake: the next checkouts find them."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from statewise.db.records import Commit, CommitResult, DeltaRecord, ScopeKey

KEPT_PER_SCOPE = 64  # the newest deltas kept of each scope (a catch-up reads further ones)
KEPT_SCOPES = 1024  # scopes kept, then all forgotten at once
KEPT_BYTES = 16 << 20  # their stored size at most, then all forgotten at once
KEPT_DELTA_BYTES = 64 << 10  # a larger delta is not kept (a catch-up reads it)


class LandedDeltas:
    """Per scope, the newest deltas this process landed, by version."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._kept: dict[ScopeKey, dict[int, DeltaRecord]] = {}
        self._bytes = 0  # the stored size of the deltas kept
        self._shared: set[str] = set()  # sessions another process was seen writing lately

    def shared(self, session_id: str) -> bool:
        """Whether another process landed on the session lately (its catch-ups then read
        what moved with the probe, in one round trip, rather than after it)."""
        return session_id in self._shared

    def mark_shared(self, session_id: str, shared: bool) -> None:
        with self._guard:
            if not shared:
                self._shared.discard(session_id)
                return
            if len(self._shared) >= KEPT_SCOPES:
                self._shared.clear()
            self._shared.add(session_id)

    def note(self, commit: Commit, result: CommitResult) -> None:
        """`commit` landed with `result` (not an earlier landing of its id)."""
        if not commit.writes:
            return
        with self._guard:
            if len(self._kept) >= KEPT_SCOPES or self._bytes >= KEPT_BYTES:
                self._kept.clear()
                self._bytes = 0
            for write in commit.writes:
                version = result.versions.get(write.key)
                if version is None or write.delta_bytes > KEPT_DELTA_BYTES:
                    continue
                kept = self._kept.setdefault(write.key, {})
                earlier = kept.get(version)
                if earlier is not None:
                    if earlier.created_at == result.committed_at:
                        continue  # (noted by its group's leader already)
                    self._bytes -= earlier.stored_bytes or 0  # (the session made anew)
                self._bytes += write.delta_bytes
                kept[version] = DeltaRecord(
                    key=write.key,
                    version=version,
                    session_id=commit.session.session_id,
                    run_id=commit.run_id,
                    step=commit.step,
                    segments=list(write.segments),
                    conflicts=list(write.conflicts),
                    created_at=result.committed_at,
                    stored_bytes=write.delta_bytes,
                )
                if len(kept) > 2 * KEPT_PER_SCOPE:
                    for old in sorted(kept)[:-KEPT_PER_SCOPE]:
                        self._bytes -= kept.pop(old).stored_bytes or 0

    def forget_session(self, session_id: str) -> None:
        """The session was deleted: a session made anew with its id numbers from 1 again."""
        with self._guard:
            kept = self._kept.pop(ScopeKey("session", session_id), None)
            self._bytes -= sum(d.stored_bytes or 0 for d in (kept or {}).values())
            self._shared.discard(session_id)

    def after(self, bases: Mapping[ScopeKey, int]) -> dict[ScopeKey, list[DeltaRecord]]:
        """For each scope, the deltas kept right after its base version, in order, up to
        the first one not kept."""
        out: dict[ScopeKey, list[DeltaRecord]] = {}
        with self._guard:
            for key, base in bases.items():
                kept = self._kept.get(key)
                found: list[DeltaRecord] = []
                while kept and (record := kept.get(base + 1 + len(found))) is not None:
                    found.append(record)
                if found:
                    out[key] = found
        return out
