"""Turn run events, outputs and stored records into JSON, with secrets redacted."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from statewise.run.output import RunOutput
from statewise.state.secrets import (
    REDACTED,
    mask_json,
    redact,
    redact_op_value,
    secret_values,
)


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


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not callable(getattr(value, f.name)) and not f.name.startswith("_")
        }
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return jsonable(model_dump(mode="json"))
    return str(value)


def redact_state(state: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    keys = frozenset(secret_keys)
    return redact(state, keys) if keys else dict(state)


def redact_ops(ops: Iterable[Mapping[str, Any]], secret_keys: frozenset[str]) -> list[Any]:
    """Ops of the session scope (paths start with the key name) with secret values hidden."""
    return [redact_op_value(op, secret_keys) for op in ops]


def redact_changes(
    changes: Iterable[Mapping[str, Any]], secret_keys: frozenset[str]
) -> list[dict[str, Any]]:
    out = []
    for change in changes:
        path = change.get("path") or [None]
        if path[0] in secret_keys:
            change = {k: (REDACTED if k in ("before", "after") else v) for k, v in change.items()}
        out.append(dict(change))
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


def redact_export_line(line: dict[str, Any], secret_keys: frozenset[str]) -> dict[str, Any]:
    if line.get("type") == "delta" and line.get("scope") == "session":
        line = {
            **line,
            "segments": [
                {**s, "ops": redact_ops(s.get("ops", []), secret_keys)}
                for s in line.get("segments", [])
            ],
        }
    return line


def output_content(output: RunOutput) -> Any:
    """A run's answer as JSON, its session's secret values masked (see `output_json`)."""
    keys = output.secret_keys or frozenset()
    values = secret_values(output.session_state, keys) if keys else ()
    return mask_json(jsonable(output.content), values)


def output_json(output: RunOutput, secret_keys: frozenset[str]) -> dict[str, Any]:
    """A run's output as JSON. The keys hidden are the ones its own data marks secret
    (`output.secret_keys`, from the session's app) as well as `secret_keys`."""
    if output.secret_keys:
        secret_keys = secret_keys | output.secret_keys
    state = output.session_state
    values = secret_values(state, secret_keys) if secret_keys else ()
    return {
        "run_id": output.run_id,
        "session_id": output.session_id,
        "user_id": output.user_id,
        "agent_name": output.agent_name,
        "status": output.status,
        "pending_tool_calls": mask_json(
            jsonable([p.to_dict() for p in output.pending_tool_calls]), values
        ),
        "content": mask_json(jsonable(output.content), values),
        "metrics": output.metrics.to_dict(),
        "conflicts": mask_json(jsonable(output.conflicts), values),
        "session_state": redact_state(state, secret_keys),
    }


def event_json(event: Any, secret_keys: frozenset[str]) -> dict[str, Any]:
    """A run event as JSON: its fields, `event` naming its type."""
    output = getattr(event, "output", None)
    if isinstance(output, RunOutput):
        return {
            "event": getattr(event, "event", "run_completed"),
            "output": output_json(output, secret_keys),
        }
    data = jsonable(event)
    if not isinstance(data, dict):
        data = {"value": data}
    data.setdefault("event", getattr(event, "event", type(event).__name__))
    return data


def sse(event: str, data: Any, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    lines.extend(f"data: {line}" for line in payload.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()
