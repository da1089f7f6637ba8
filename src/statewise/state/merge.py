"""TEMPORARY stand-in (replaced by the state branch's implementation on merge)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise.state.ops import Op, apply_op

Rule = str | Callable[[Any, Any, Any], Any]


class Rules:
    def __init__(self, mapping: Mapping[str, Rule] | None = None) -> None:
        self.mapping = dict(mapping or {})

    def rule_for(self, path: Sequence[str | int]) -> Rule:
        return self.mapping.get(str(path[0]), "last_write_wins")

    def merged(self, other: Rules) -> Rules:
        return Rules({**self.mapping, **other.mapping})


@dataclass
class Conflict:
    path: tuple[Any, ...]
    theirs: Any
    ours: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "theirs": self.theirs, "ours": self.ours}


@dataclass
class RebaseResult:
    ops: list[Op]
    conflicts: list[Conflict] = field(default_factory=list)


def rebase(
    latest: dict[str, Any], theirs: Sequence[Op], ours: Sequence[Op], rules: Rules
) -> RebaseResult:
    for op in ours:
        apply_op(latest, op)
    return RebaseResult(ops=list(ours))
