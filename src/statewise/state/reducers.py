"""Built-in merge reducers: how a key combines two concurrent writes.

A reducer is called as `reducer(base, theirs, ours)`: `base` is the value our run saw
before writing (MISSING if absent), `theirs` what is stored now (other writers' result),
`ours` what our run wrote. It returns the merged value (MISSING means "delete").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeAlias, get_args

from statewise.exceptions import ConfigurationError
from statewise.state.ops import MISSING

__all__ = ["BUILTIN_RULES", "Reducer", "Rule", "RuleName", "resolve_rule", "rule_name"]

Reducer: TypeAlias = Callable[[Any, Any, Any], Any]
RuleName = Literal["last_write_wins", "strict", "sum", "max", "min", "union"]
Rule: TypeAlias = RuleName | Reducer


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _present(value: Any) -> bool:
    return value is not MISSING and value is not None


def sum_reducer(base: Any, theirs: Any, ours: Any) -> Any:
    """theirs + (ours - base): both sides' increments survive (missing counts as 0)."""
    b = base if _present(base) else 0
    t = theirs if _present(theirs) else 0
    if not (_is_num(b) and _is_num(t) and _is_num(ours)):
        return ours  # not numbers: nothing to add, fall back to last write wins
    return t + (ours - b)


def max_reducer(base: Any, theirs: Any, ours: Any) -> Any:
    """The larger of the two writes (a side that is missing or not a number loses)."""
    if not (_present(theirs) and _is_num(theirs)):
        return ours
    if not _is_num(ours):
        return theirs
    return max(theirs, ours)


def min_reducer(base: Any, theirs: Any, ours: Any) -> Any:
    """The smaller of the two writes (a side that is missing or not a number loses)."""
    if not (_present(theirs) and _is_num(theirs)):
        return ours
    if not _is_num(ours):
        return theirs
    return min(theirs, ours)


def union_reducer(base: Any, theirs: Any, ours: Any) -> Any:
    """Lists: theirs plus our items not in theirs (order kept). Dicts: key-wise union,
    ours wins on a shared key. Anything else: ours."""
    if isinstance(theirs, list) and isinstance(ours, list):
        return theirs + [item for item in ours if item not in theirs]
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return {**theirs, **ours}
    return ours


BUILTIN_RULES: dict[str, Rule] = {
    "last_write_wins": "last_write_wins",
    "strict": "strict",
    "sum": sum_reducer,
    "max": max_reducer,
    "min": min_reducer,
    "union": union_reducer,
}
_NAMES = frozenset(get_args(RuleName))


def resolve_rule(rule: Any) -> Rule:
    """A rule name or callable, checked; built-in reducer names become their functions
    (`last_write_wins` and `strict` stay names: they are not reducers)."""
    if isinstance(rule, str):
        if rule not in _NAMES:
            raise ConfigurationError(
                f"unknown merge rule {rule!r}; known rules: {', '.join(sorted(_NAMES))} "
                "(or a function (base, theirs, ours) -> merged)"
            )
        return BUILTIN_RULES[rule]
    if callable(rule):
        return rule  # type: ignore[no-any-return]
    raise ConfigurationError(f"a merge rule must be a name or a function, got {rule!r}")


def rule_name(rule: Rule) -> str:
    """The name a Conflict records: the built-in's name or the function's qualname."""
    if isinstance(rule, str):
        return rule
    for name, builtin in BUILTIN_RULES.items():
        if builtin is rule:
            return name
    return getattr(rule, "__qualname__", repr(rule))
