"""Rebuild a scope's state from its snapshot and the deltas after it.

Shared by every backend, so a corrupt row is reported the same way everywhere: naming the
scope and the version, never as a bare JSON error, and never as a silently wrong state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statewise.db import _codec
from statewise.db.records import DeltaRecord, DeltaSegment, ScopeKey, ScopeState
from statewise.exceptions import CorruptRecordError, StateError
from statewise.state.ops import Op, apply_op


def decode_segments(key: ScopeKey, version: int, text: str | bytes) -> list[DeltaSegment]:
    decoded = _segments_text(key, version, text)
    try:
        raw = _codec.loads(decoded)
        return [DeltaSegment(source=s["source"], ops=s["ops"]) for s in raw]
    except (ValueError, KeyError, TypeError) as exc:
        raise _corrupt_delta(key, version, exc) from exc


def _segments_text(key: ScopeKey, version: int, raw: str | bytes) -> str:
    """A delta's stored segments as text (a backend may hand over UTF-8 bytes)."""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise _corrupt_delta(key, version, exc) from exc


def _corrupt_delta(key: ScopeKey, version: int, exc: Exception) -> CorruptRecordError:
    return CorruptRecordError(f"{key}: the delta at version {version} is corrupt ({exc})")


def decode_delta_row(
    key: ScopeKey,
    version: int,
    session_id: str | None,
    run_id: str | None,
    step: int | None,
    segments: str | bytes,
    conflicts: str | bytes | None,
    created_at: float,
) -> DeltaRecord:
    try:
        decoded_conflicts = _codec.loads(conflicts) if conflicts else []
    except ValueError as exc:
        raise CorruptRecordError(f"{key}: conflicts at version {version} are corrupt") from exc
    text = _segments_text(key, version, segments)
    return DeltaRecord(
        key=key,
        version=version,
        session_id=session_id,
        run_id=run_id,
        step=step,
        segments=decode_segments(key, version, text),
        conflicts=decoded_conflicts,
        created_at=created_at,
        stored_bytes=len(text),
    )


def apply_segments(
    key: ScopeKey, version: int, doc: dict[str, Any], segments: Iterable[DeltaSegment]
) -> None:
    for segment in segments:
        for raw in segment.ops:
            try:
                apply_op(doc, Op.from_json(raw))
            except StateError as exc:
                raise CorruptRecordError(
                    f"{key}: the delta at version {version} does not apply ({exc})"
                ) from exc


def rebuild_scope(
    key: ScopeKey,
    snapshot_version: int,
    snapshot_text: str | bytes | None,
    delta_rows: Iterable[tuple[int, str | bytes]],
    version: int,
) -> dict[str, Any]:
    """The state at `version`: the snapshot, then each later delta in order."""
    doc: dict[str, Any] = {}
    if snapshot_version:
        if snapshot_text is None:
            raise CorruptRecordError(
                f"{key}: the snapshot at version {snapshot_version} is missing"
            )
        try:
            doc = _codec.loads(snapshot_text)
        except ValueError as exc:
            raise CorruptRecordError(
                f"{key}: the snapshot at version {snapshot_version} is not JSON"
            ) from exc
        if not isinstance(doc, dict):
            raise CorruptRecordError(
                f"{key}: the snapshot at version {snapshot_version} is not an object"
            )
    expected = snapshot_version
    for delta_version, text in delta_rows:
        expected += 1
        if delta_version != expected:
            raise CorruptRecordError(f"{key}: delta {expected} is missing (found {delta_version})")
        apply_segments(key, delta_version, doc, decode_segments(key, delta_version, text))
    if expected != version:
        raise CorruptRecordError(f"{key}: deltas end at version {expected}, scope says {version}")
    return doc


def rebuilt_scope(
    key: ScopeKey,
    version: int,
    snapshot_version: int,
    snapshot_bytes: int,
    tail_bytes: int,
    snapshot_text: str | bytes | None,
    delta_rows: Iterable[tuple[int, str | bytes]],
) -> ScopeState:
    """A scope as a backend read it (its row, its snapshot, the deltas after it), rebuilt:
    every backend's load and read builds its scopes here, so they measure and check them
    alike."""
    return ScopeState(
        key=key,
        version=version,
        data=rebuild_scope(key, snapshot_version, snapshot_text, delta_rows, version),
        snapshot_version=snapshot_version,
        snapshot_bytes=snapshot_bytes,
        tail_bytes=tail_bytes,
    )
