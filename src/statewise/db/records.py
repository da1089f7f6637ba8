"""What the storage layer stores and returns: plain dataclasses, JSON-ready.

State is kept per *scope*: a session's own keys, a user's `user:` keys and an app's `app:`
keys each live under their own version, so writers of different sessions of one user
only meet on the `user:` scope. A scope is a snapshot plus the deltas committed since it;
snapshots are taken now and then (the store decides when), so a commit writes what
changed, not the whole state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

ScopeKind = Literal["session", "user", "app"]
RunStatus = Literal["running", "completed", "failed", "paused"]


class ScopeKey(NamedTuple):
    """Names one versioned piece of state: a session's keys, a user's, or an app's.

    A named tuple (immutable, ordered, hashed in C): a run looks scopes up by key a few
    dozen times, and a dataclass's hash and constructor run Python code each time.
    """

    kind: ScopeKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind} {self.id!r}"


@dataclass(kw_only=True, slots=True)
class SessionRecord:
    session_id: str
    user_id: str | None = None
    app_name: str | None = None
    kind: str = "agent"
    created_at: float = 0.0
    updated_at: float = 0.0
    last_seq: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "user_id": self.user_id,
            "app_name": self.app_name,
            "kind": self.kind,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "last_seq": self.last_seq,
            "metadata": self.metadata,
        }


@dataclass(kw_only=True, slots=True)
class ScopeState:
    """A scope's state at `version`, and how much delta has piled up since its snapshot."""

    key: ScopeKey
    version: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    snapshot_version: int = 0
    snapshot_bytes: int = 0
    tail_bytes: int = 0


@dataclass(kw_only=True, slots=True)
class DeltaSegment:
    """The ops one source (a tool call, a callback, an API call) made in one commit."""

    source: str
    ops: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "ops": self.ops}


@dataclass(kw_only=True, slots=True)
class DeltaRecord:
    """One committed change of one scope: the version it produced and who made it."""

    key: ScopeKey
    version: int
    session_id: str | None
    run_id: str | None
    step: int | None
    segments: list[DeltaSegment]
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    created_at: float = 0.0
    # The length of the segments' stored JSON text, when read from storage: what the
    # scope's tail grew by with this delta (None when made otherwise, e.g. imported).
    stored_bytes: int | None = field(default=None, compare=False)
    # Its ops as one reader decoded them (`StateCodec.decode_ops`: that codec, its ops):
    # the same delta is applied by every writer of a busy session, decoded once.
    decoded: tuple[object, list[Any]] | None = field(default=None, compare=False, repr=False)

    @property
    def ops(self) -> list[dict[str, Any]]:
        return [op for segment in self.segments for op in segment.ops]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.key.kind,
            "scope_id": self.key.id,
            "version": self.version,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "step": self.step,
            "segments": [s.to_dict() for s in self.segments],
            "conflicts": self.conflicts,
            "created_at": self.created_at,
        }


@dataclass(kw_only=True, slots=True)
class EventRecord:
    session_id: str
    seq: int
    type: str
    data: dict[str, Any]
    run_id: str | None = None
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "type": self.type,
            "run_id": self.run_id,
            "data": self.data,
            "created_at": self.created_at,
        }


@dataclass(kw_only=True, slots=True)
class RunRecord:
    session_id: str
    run_id: str
    status: RunStatus = "running"
    agent_name: str | None = None
    input: str | None = None
    content: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "status": self.status,
            "agent_name": self.agent_name,
            "input": self.input,
            "content": self.content,
            "messages": self.messages,
            "metrics": self.metrics,
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(kw_only=True, slots=True)
class NewEvent:
    """An event to append; the database gives it the next sequence number."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None


@dataclass(kw_only=True, slots=True)
class ScopeWrite:
    """A compare-and-swap on one scope: apply `segments` on top of `base_version`.

    `snapshot`, when given, is the complete state after this write; the database stores it
    so later loads need not apply the deltas before it again. A snapshot can be megabytes: it
    is encoded once (`snapshot_text`), and that text is what backends store and measure.
    """

    key: ScopeKey
    base_version: int
    segments: list[DeltaSegment]
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    snapshot: dict[str, Any] | None = None
    delta_bytes: int = 0
    _snapshot_text: str | None = field(default=None, repr=False, compare=False)
    _segments_text: str | None = field(default=None, repr=False, compare=False)

    @property
    def snapshot_text(self) -> str | None:
        """`snapshot` as stored JSON, encoded on first use and then reused."""
        if self.snapshot is None:
            return None
        if self._snapshot_text is None:
            from statewise.db._codec import dumps

            self._snapshot_text = dumps(self.snapshot)
        return self._snapshot_text

    @property
    def snapshot_bytes(self) -> int:
        text = self.snapshot_text
        return len(text) if text is not None else 0

    @property
    def segments_text(self) -> str:
        """`segments` as stored JSON, encoded once."""
        if self._segments_text is None:
            from statewise.db._codec import dumps

            self._segments_text = dumps([s.to_dict() for s in self.segments])
        return self._segments_text


@dataclass(kw_only=True, slots=True)
class Commit:
    """Everything one commit point persists, atomically.

    `create_session` asks that the session not exist yet (two processes creating the same
    session race on it like on a version).

    `commit_id` names this commit for exactly-once delivery: the database stores it in the
    same transaction as the commit, and a commit whose id is already stored is not applied
    again; the database answers with the result stored for it (`CommitResult.already_landed`).
    A commit keeps its id across retries and rebases.
    """

    session: SessionRecord
    commit_id: str = ""
    create_session: bool = False
    writes: list[ScopeWrite] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    run: RunRecord | None = None
    run_id: str | None = None
    step: int | None = None


@dataclass(kw_only=True, slots=True)
class CommitResult:
    versions: dict[ScopeKey, int]
    first_seq: int
    last_seq: int
    committed_at: float
    already_landed: bool = False  # the commit id had already landed: nothing was applied again


def applied_result(commit: Commit, last_seq: int, committed_at: float) -> CommitResult:
    """What `commit` landed as when it was applied now, leaving the session at `last_seq`:
    each scope one version past the one it was based on, its events numbered up to it."""
    return CommitResult(
        versions={w.key: w.base_version + 1 for w in commit.writes},
        first_seq=last_seq - len(commit.events) + 1,
        last_seq=last_seq,
        committed_at=committed_at,
    )


def encode_commit_result(versions: dict[ScopeKey, int], last_seq: int, n_events: int) -> str:
    """How a backend stores a commit's result next to its commit id (compact text)."""
    return str(last_seq) + commit_result_tail(versions, n_events)


def commit_result_tail(versions: dict[ScopeKey, int], n_events: int) -> str:
    """A stored commit result without its leading last sequence number, for a backend that
    learns that number only inside the statement that stores it."""
    return "".join([f"|{n_events}", *(f"|{key.kind}={v}" for key, v in versions.items())])


def decode_commit_result(commit: Commit, text: str, committed_at: float = 0.0) -> CommitResult:
    """The stored result of an already landed commit, for `commit`'s scope keys."""
    fields = text.split("|")
    last_seq, n_events = int(fields[0]), int(fields[1])
    by_kind = dict(f.split("=", 1) for f in fields[2:])
    versions = {}
    for write in commit.writes:
        if write.key.kind in by_kind:
            versions[write.key] = int(by_kind[write.key.kind])
    return CommitResult(
        versions=versions,
        first_seq=last_seq - n_events + 1,
        last_seq=last_seq,
        committed_at=committed_at,
        already_landed=True,
    )
