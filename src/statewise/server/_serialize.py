"""Turn run events, outputs and stored records into JSON. Nothing here redacts: what it is
given comes from `statewise.Sessions`, whose reads (and run outputs) are redacted by the
session's own data."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from statewise import RunOutput, Sessions
from statewise.agent.service import jsonable


def rfc3339(timestamp: float | None) -> str | None:
    """A stored time (Unix seconds) as API bodies give it: RFC 3339 in UTC, to the
    microsecond (`2026-11-27T06:20:01.123456Z`). Exports keep the stored numbers."""
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def with_times(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """`data` with its time fields (`created_at`, `updated_at` by default) as RFC 3339."""
    out = dict(data)
    for key in keys or ("created_at", "updated_at"):
        if key in out and isinstance(out[key], int | float):
            out[key] = rfc3339(out[key])
    return out


def refine_list_changes(changes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A list that changed shows as per-index changes (appended items as `added`, dropped
    tail items as `removed`) instead of one whole-list change, when that reads better."""
    out: list[dict[str, Any]] = []
    for change in changes:
        before, after = change.get("before"), change.get("after")
        if change.get("kind") != "changed" or not (
            isinstance(before, list) and isinstance(after, list)
        ):
            out.append(dict(change))
            continue
        path = list(change.get("path") or [])
        for i in range(max(len(before), len(after))):
            if i >= len(before):
                out.append({"path": [*path, i], "kind": "added", "after": after[i]})
            elif i >= len(after):
                out.append({"path": [*path, i], "kind": "removed", "before": before[i]})
            elif before[i] != after[i]:
                out.append(
                    {"path": [*path, i], "kind": "changed", "before": before[i], "after": after[i]}
                )
    return out


def event_json(event: Any, sessions: Sessions) -> dict[str, Any]:
    """A run event as JSON: its fields, `event` naming its type; a run's output as
    `sessions` gives it (redacted). A final output may read stored state: call this off
    the event loop for it (see `needs_read`)."""
    output = getattr(event, "output", None)
    if isinstance(output, RunOutput):
        return {
            "event": getattr(event, "event", "run_completed"),
            "output": sessions.output_json(output),
        }
    data = jsonable(event)
    if not isinstance(data, dict):
        data = {"value": data}
    data.setdefault("event", getattr(event, "event", type(event).__name__))
    return data


def needs_read(event: Any) -> bool:
    """Whether turning `event` into JSON reads the database (see `output_needs_read`)."""
    output = getattr(event, "output", None)
    return isinstance(output, RunOutput) and output_needs_read(output)


def output_needs_read(output: RunOutput) -> bool:
    """Whether `Sessions.output_json` reads the database for this output: its run did
    not keep its state, or the keys it saw as secret."""
    return output.secret_keys is None or output.session_state_if_loaded() is None


def sse(event: str, data: Any, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    lines.extend(f"data: {line}" for line in payload.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


__all__ = [
    "event_json",
    "jsonable",
    "needs_read",
    "output_needs_read",
    "refine_list_changes",
    "rfc3339",
    "sse",
    "with_times",
]
