"""The system message, rendered from state before every model call."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statewise.db.store import visible_state
from statewise.exceptions import TemplateKeyError
from statewise.run._observe import unknown_template_keys
from statewise.run.context import RunContext
from statewise.state.secrets import Redaction
from statewise.state.template import render_template

Instructions = str | Sequence[str] | Callable[..., "str | Sequence[str] | None"] | None


def _call_instructions(fn: Callable[..., Any], ctx: RunContext, agent: Any) -> Any:
    import inspect

    names = inspect.signature(fn).parameters
    available = {
        "agent": agent,
        "run_context": ctx,
        "session_state": ctx.session_state,
        "team": agent,
    }
    return fn(**{n: available[n] for n in names if n in available})


def build_system_prompt(
    *,
    agent: Any,
    ctx: RunContext,
    description: str | None,
    instructions: Instructions,
    resolve_in_context: bool,
    markdown: bool,
    add_session_state_to_context: bool,
    enable_agentic_state: bool,
    secret_keys: frozenset[str],
    expose_secrets_to_model: bool,
    extra: Sequence[str] = (),
    strict_templates: bool = False,
) -> str | None:
    state: Mapping[str, Any] = ctx.session_state
    if secret_keys and not expose_secrets_to_model:
        state = Redaction(secret_keys).state(state)  # a prompt is data leaving the engine
    parts: list[str] = []
    missing: list[str] = []
    if description:
        parts.append(
            render_template(description, state, missing) if resolve_in_context else description
        )
    value = _call_instructions(instructions, ctx, agent) if callable(instructions) else instructions
    if isinstance(value, str):
        lines = [value]
    elif value:
        lines = list(value)
    else:
        lines = []
    if resolve_in_context:
        lines = [render_template(line, state, missing) for line in lines]
    if missing:
        who = getattr(agent, "name", None)
        if strict_templates:
            raise TemplateKeyError(missing[0], who)
        unknown_template_keys(agent, who, missing)
    if len(lines) > 1:
        parts.append("\n".join(f"- {line}" for line in lines))
    elif lines:
        parts.append(lines[0])
    parts.extend(extra)
    if markdown:
        parts.append("Use markdown to format your answers.")
    if add_session_state_to_context:
        visible = visible_state(state)
        parts.append(
            "<session_state>\n" + json.dumps(visible, ensure_ascii=False) + "\n</session_state>"
        )
    if enable_agentic_state:
        parts.append(
            "You can change the session state with the `update_session_state` tool: "
            "`set` keys to values, `delete` keys, or `append` items to lists."
        )
    return "\n\n".join(parts) if parts else None
