"""The `update_session_state` tool that `enable_agentic_state=True` gives the model."""

from __future__ import annotations

from typing import Any

from statewise.run.context import RunContext
from statewise.tools.function import Function


def update_session_state(
    run_context: RunContext,
    set: dict[str, Any] | None = None,
    delete: list[str] | None = None,
    append: dict[str, list[Any]] | None = None,
) -> str:
    """Change the session state.

    Args:
        set: Keys to set, with their new values, e.g. {"shopping_list": ["milk"]}.
        delete: Keys to remove.
        append: Items to append to list keys, e.g. {"shopping_list": ["eggs", "bread"]}.
    """
    state = run_context.session_state
    for key, value in (set or {}).items():
        state[key] = value
    for key in delete or []:
        state.pop(key, None)
    for key, items in (append or {}).items():
        current = state.setdefault(key, [])
        if not isinstance(current, list):
            raise ValueError(f"cannot append to {key!r}: it holds a {type(current).__name__}")
        current.extend(items)
    # The reply names what changed, never the values: a value may be a secret key's, and
    # the reply is stored in the event log and sent to the model.
    parts = [
        f"{verb} {', '.join(map(repr, keys))}"
        for verb, keys in (
            ("set", list(set or {})),
            ("deleted", delete or []),
            ("appended to", list(append or {})),
        )
        if keys
    ]
    return "Session state updated: " + ("; ".join(parts) or "nothing changed") + "."


def agentic_state_tool() -> Function:
    return Function.from_callable(update_session_state)
