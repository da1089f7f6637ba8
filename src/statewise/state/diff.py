"""The difference between two states, path by path (for history views and the UI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from statewise.state.ops import MISSING


@dataclass(kw_only=True, frozen=True, slots=True)
class Change:
    path: tuple[str | int, ...]
    kind: Literal["added", "removed", "changed"]
    before: Any = None
    after: Any = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": list(self.path), "kind": self.kind}
        if self.kind != "added":
            data["before"] = self.before
        if self.kind != "removed":
            data["after"] = self.after
        return data


def diff_states(before: Any, after: Any, path: tuple[str | int, ...] = ()) -> list[Change]:
    """Dicts are compared key by key, recursively; any other value as a whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in before:
            if key not in after:
                changes.append(Change(path=(*path, key), kind="removed", before=before[key]))
        for key, value in after.items():
            if key not in before:
                changes.append(Change(path=(*path, key), kind="added", after=value))
            elif before[key] != value:
                changes.extend(diff_states(before[key], value, (*path, key)))
        return changes
    if before is MISSING:
        return [Change(path=path, kind="added", after=after)]
    if before != after:
        return [Change(path=path, kind="changed", before=before, after=after)]
    return []
