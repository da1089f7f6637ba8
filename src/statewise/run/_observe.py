"""Seeing what a run did: debug logging and OpenTelemetry spans, from one place.

The run loop, the run driver, commits and workflows call the few functions below at
their boundaries (run, step, model call, tool call, commit). Nothing here changes what a
run does.

Logging goes through the standard `logging` module, logger "statewise". A run logs its
model requests, tool calls, commits and conflicts when the agent, team or workflow has
`debug_mode=True` (nested agents inherit it from the run they are part of) or when the
environment says `STATEWISE_LOG=debug`. Without any logging configuration, a handler on
stderr is added the first time something is to be logged.

Spans go to OpenTelemetry's global tracer provider whenever `opentelemetry-api` is
importable (the `otel` extra); without a provider configured they cost nothing. Each run,
step, model call (GenAI semantic conventions), tool call and commit is a span, its parent
found through the run context (never through context variables, which do not survive
the async generators a run is made of), so spans nest across teams and workflows.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from statewise.state.secrets import mask_text

logger = logging.getLogger("statewise")

try:  # the `otel` extra
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - depends on the environment
    _trace = None  # type: ignore[assignment]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def _env_level() -> int | None:
    return _LEVELS.get((_getenv("STATEWISE_LOG") or "").strip().lower())


def _getenv(name: str) -> str | None:
    """`os.environ.get(name)`, read at every run (a change between runs counts), without
    the two KeyErrors `os.environ.get` raises and catches when the variable is not set,
    the common case (they were a hundredth of a small in-memory run): the name is looked
    up in the dict behind `os.environ` (CPython's `_Environ`), if it has one."""
    environ = os.environ
    data = getattr(environ, "_data", None)
    encodekey = getattr(environ, "encodekey", None)
    decodevalue = getattr(environ, "decodevalue", None)
    if not isinstance(data, dict) or encodekey is None or decodevalue is None:
        return environ.get(name)
    raw = data.get(encodekey(name))
    return None if raw is None else str(decodevalue(raw))


def env_debug() -> bool:
    """`STATEWISE_LOG=debug`: log every run as if it had `debug_mode=True`."""
    return _env_level() == logging.DEBUG


def ensure_logging(level: int = logging.DEBUG) -> None:
    """Make records of `level` from the "statewise" logger visible: lower its level if it
    is higher, and add a stderr handler when no logging is configured at all."""
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("statewise %(levelname)s %(message)s"))
        logger.addHandler(handler)


def _short(value: Any, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# ---- who is the parent of what ---------------------------------------------------------

Masker = Callable[[], tuple[str, ...]]


class _Node:
    """Where a run (or a step, a tool call) records: its span and whether it logs.
    `quiet` (neither traced nor logged: nothing below it records anything) is decided
    once here, not at each of the lookups every step, call and commit make."""

    __slots__ = ("debug", "mask", "name", "quiet", "span")

    def __init__(
        self, span: Any, debug: bool, name: str | None = None, mask: Masker | None = None
    ) -> None:
        self.span = span
        self.debug = debug
        self.name = name
        self.mask = mask  # the run's secret values now (a run context's `secret_values`)
        self.quiet = span is None and not debug


# Which node a run context or writer belongs to: an attribute of the object itself (one
# lookup at each step, model call, tool call and commit; a registry keyed by the object
# needed a weak reference per entry and two lookups per query).
_NODE_ATTR = "_statewise_observed"


@dataclass(eq=False, slots=True)
class Token:
    """What `finish` needs: the span to end and the nodes to restore."""

    span: Any
    debug: bool
    keys: tuple[Any, ...]
    previous: tuple[_Node | None, ...]
    name: str | None = None
    mask: Masker | None = None


def _node(key: Any) -> _Node | None:
    node: _Node | None = getattr(key, _NODE_ATTR, None)
    return node


def quiet_under(parent: Any) -> bool:
    """True when `parent` belongs to a run that is neither traced nor logged: its steps,
    calls and commits then record nothing, and cost no more than this lookup."""
    node: _Node | None = getattr(parent, _NODE_ATTR, None)
    return node is not None and node.quiet


def debugging(key: Any) -> bool:
    """Whether the run that `key` (a run context or writer) belongs to logs in detail."""
    node = _node(key)
    return (node.debug if node is not None else False) or env_debug()


QUIET = Token(span=None, debug=False, keys=(), previous=())
"""What every boundary inside a run that is neither traced nor logged gets: nothing is
recorded for it, and finishing it does nothing."""


def _start(
    name: str,
    parent: Any,
    keys: Sequence[Any],
    *,
    debug: bool | None = None,
    attributes: Mapping[str, Any] | None = None,
    agent_name: str | None = None,
    mask: Masker | None = None,
) -> Token:
    parent_node = _node(parent)
    if parent_node is not None and parent_node.quiet and not debug and agent_name is None:
        # Inside a run that is neither traced nor logged (decided once, when it started)
        # a step, tool call or commit has nothing to record, and a node of its own would
        # tell its children exactly what the run's node tells them.
        return QUIET
    span = None
    # With no provider configured spans would record nothing, so none are made; on a
    # small in-memory run they were a quarter of its time.
    if _trace is not None and not _untraced():
        tracer = _trace.get_tracer("statewise", tracer_provider=_trace.get_tracer_provider())
        context = (
            _trace.set_span_in_context(parent_node.span)
            if parent_node is not None and parent_node.span is not None
            else None
        )
        span = tracer.start_span(
            name,
            context=context,
            attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        )
    # A child inherits its parent's setting, which already read the environment.
    inherited = parent_node.debug if parent_node is not None else env_debug()
    on = bool(debug) or inherited
    if on:
        ensure_logging()
    if agent_name is None and parent_node is not None:
        agent_name = parent_node.name
    if mask is None and parent_node is not None:
        mask = parent_node.mask
    return _register(span, on, agent_name, keys, mask)


def _register(
    span: Any, debug: bool, name: str | None, keys: Sequence[Any], mask: Masker | None = None
) -> Token:
    """Make `keys` (a run's context and writer) the parents of what happens under them."""
    node = _Node(span, debug, name, mask)
    live = []
    previous = []
    for key in keys:
        if key is not None:
            live.append(key)
            previous.append(getattr(key, _NODE_ATTR, None))
            setattr(key, _NODE_ATTR, node)
    return Token(
        span=span, debug=debug, keys=tuple(live), previous=tuple(previous), name=name, mask=mask
    )


def _untraced() -> bool:
    """No tracer provider configured (the API's proxy): spans would record nothing."""
    return _trace is None or isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)


def finish(token: Token, error: BaseException | None = None) -> None:
    """End the span (marking an error) and give the keys back their previous parent."""
    if token is QUIET:
        return
    for key, previous in zip(token.keys, token.previous, strict=True):
        setattr(key, _NODE_ATTR, previous)
    span = token.span
    if span is None:
        return
    if error is not None and not isinstance(error, GeneratorExit):
        text = _masked(token, str(error))
        span.record_exception(error, attributes={"exception.message": text})
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {text}"))
    span.end()


def _log(token: Token | None, debug: bool, message: str, *args: Any) -> None:
    """One debug line; the run's secret values (as its state has them now) are masked in
    it, whatever carried them there (a prompt that shows secrets to the model, a tool's
    arguments or result, an error)."""
    if debug:
        who = f"[{token.name}] " if token is not None and token.name else ""
        text = (who + message) % args if args else who + message
        values = token.mask() if token is not None and token.mask is not None else ()
        logger.debug("%s", mask_text(text, values) if values else text)


def _masked(token: Token, text: str) -> str:
    """`text` for a span (attributes, status): the run's secret values masked."""
    values = token.mask() if token.mask is not None else ()
    return mask_text(text, values) if values else text


# ---- runs and steps --------------------------------------------------------------------


def run_started(
    ctx: Any,
    writer: Any,
    *,
    kind: str,
    name: str | None,
    session_id: str,
    run_id: str,
    debug: bool,
    parent: Any = None,
) -> Token:
    """A run of an agent, team or workflow; `parent` is the host's context when this run
    is nested (a team member, a workflow step's agent)."""
    if not debug:
        parent_node = _node(parent)
        inherited = parent_node.debug if parent_node is not None else env_debug()
        if not inherited and _untraced():
            # Neither traced nor logged: no span, no attributes, nothing to format.
            return _register(None, False, name or kind, (ctx, writer))
    operation = "invoke_workflow" if kind == "workflow" else "invoke_agent"
    token = _start(
        f"{operation} {name or kind}",
        parent,
        (ctx, writer),
        debug=debug,
        agent_name=name or kind,
        mask=getattr(ctx, "secret_values", None),
        attributes={
            "gen_ai.operation.name": operation,
            "gen_ai.agent.name": name,
            "statewise.kind": kind,
            "statewise.session_id": session_id,
            "statewise.run_id": run_id,
            "gen_ai.conversation.id": session_id,
        },
    )
    _log(token, token.debug, "%s run %s started (session %s)", kind, run_id, session_id)
    return token


class _Summary(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def run_finished(
    token: Token, *, metrics: _Summary | None = None, error: BaseException | None = None
) -> None:
    """`metrics` (the run's `RunMetrics`) is summarised only when something records it."""
    if token.span is None and not token.debug:
        finish(token)
        return
    summary = metrics.to_dict() if metrics is not None else None
    if token.span is not None and summary:
        for key in ("input_tokens", "output_tokens"):
            if summary.get(key) is not None:
                token.span.set_attribute(f"gen_ai.usage.{key}", int(summary[key]))
        for key in ("model_requests", "tool_calls"):
            if summary.get(key) is not None:
                token.span.set_attribute(f"statewise.{key}", int(summary[key]))
    if error is not None and not isinstance(error, GeneratorExit):
        _log(token, token.debug, "run failed: %s: %s", type(error).__name__, error)
    elif summary is not None and token.debug:
        _log(token, True, "run completed: %s", _short(summary))
    finish(token, error)


def step_started(ctx: Any, writer: Any, name: str, *, index: int | None = None) -> Token:
    if quiet_under(ctx):
        return QUIET
    token = _start(
        f"step {name}",
        ctx,
        (ctx, writer),
        attributes={"statewise.step.name": name, "statewise.step.index": index},
    )
    _log(token, token.debug, "step %s started", name)
    return token


# ---- model and tool calls --------------------------------------------------------------


def model_request(
    ctx: Any, model: Any, messages: Sequence[Any], tools: Sequence[Any], step: int
) -> Token:
    if quiet_under(ctx):
        return QUIET
    model_id = getattr(model, "id", None)
    token = _start(
        f"chat {model_id}",
        ctx,
        (),
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model_id,
            "gen_ai.provider.name": getattr(model, "provider", None),
            "gen_ai.system": getattr(model, "provider", None),
            "statewise.step": step,
        },
    )
    if token.debug:
        system = next((m.content for m in messages if m.role == "system"), None)
        _log(
            token,
            True,
            "model request %s (step %d): %d messages, tools %s\nsystem prompt:\n%s",
            getattr(model, "name", model_id),
            step,
            len(messages),
            [t.name for t in tools],
            system if system is not None else "(none)",
        )
    return token


def model_response(token: Token, response: Any) -> None:
    if token is QUIET:
        return
    usage = getattr(response, "usage", None)
    if token.span is not None:
        if usage is not None:
            token.span.set_attribute("gen_ai.usage.input_tokens", int(usage.input_tokens))
            token.span.set_attribute("gen_ai.usage.output_tokens", int(usage.output_tokens))
        model = getattr(response, "model", None)
        if isinstance(model, str):
            token.span.set_attribute("gen_ai.response.model", model)
        calls = getattr(response, "tool_calls", None) or []
        token.span.set_attribute(
            "gen_ai.response.finish_reasons", ["tool_calls" if calls else "stop"]
        )
    if token.debug:
        calls = [f"{c.name}({_short(c.arguments, 300)})" for c in response.tool_calls]
        _log(
            token,
            True,
            "model response: %s%s (tokens in %s, out %s)",
            _short(response.content or "", 500) if response.content else "",
            f" tool calls {calls}" if calls else "",
            usage.input_tokens if usage else 0,
            usage.output_tokens if usage else 0,
        )
    finish(token)


def model_failed(token: Token, error: BaseException) -> None:
    _log(token, token.debug, "model request failed: %s: %s", type(error).__name__, error)
    finish(token, error)


def tool_started(ctx: Any, writer: Any, call: Any) -> Token:
    if quiet_under(ctx):
        return QUIET
    token = _start(
        f"execute_tool {call.name}",
        ctx,
        (ctx, writer),
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
        },
    )
    if token.debug:
        _log(token, True, "tool call %s(%s)", call.name, _short(call.arguments, 1000))
    return token


def tool_finished(token: Token, result: str, is_error: bool) -> None:
    if token is QUIET:
        return
    if token.span is not None and is_error:
        token.span.set_attribute("error.type", "tool_error")
        token.span.set_status(Status(StatusCode.ERROR, _masked(token, result)[:200]))
    if token.debug:
        _log(token, True, "tool result%s: %s", " (error)" if is_error else "", _short(result, 1000))
    finish(token)


# ---- commits ---------------------------------------------------------------------------


def commit_started(writer: Any, session_id: str, source: str, step: int | None) -> Token:
    if quiet_under(writer):
        return QUIET
    return _start(
        "statewise.commit",
        writer,
        (),
        attributes={
            "statewise.session_id": session_id,
            "statewise.commit.source": source,
            "statewise.step": step,
        },
    )


def commit_finished(
    token: Token,
    *,
    versions: Mapping[str, int] | None = None,
    ops: Sequence[Mapping[str, Any]] = (),
    conflicts: Sequence[Mapping[str, Any]] = (),
    error: BaseException | None = None,
) -> None:
    if token is QUIET:
        return
    if token.span is not None and error is None:
        token.span.set_attribute("statewise.commit.op_count", len(ops))
        token.span.set_attribute("statewise.commit.conflicts", len(conflicts))
        for kind, version in (versions or {}).items():
            token.span.set_attribute(f"statewise.version.{kind}", int(version))
        if versions and "session" in versions:
            token.span.set_attribute("statewise.version", int(versions["session"]))
    if error is None and token.debug:  # (arguments are formatted only when logged)
        _log(
            token,
            True,
            "commit: versions %s, %d ops %s",
            dict(versions or {}),
            len(ops),
            _short(list(ops), 1500),
        )
        for conflict in conflicts:
            _log(token, True, "conflict resolved: %s", _short(dict(conflict), 1000))
    finish(token, error)


# ---- templates -------------------------------------------------------------------------

_warned: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def unknown_template_keys(owner: Any, name: str | None, keys: Sequence[str]) -> None:
    """Warn once per key and per agent about `{key}` references the state does not have."""
    try:
        seen = _warned.setdefault(owner, set())
    except TypeError:  # not weak-referenceable: warn every time
        seen = set()
    for key in keys:
        if key not in seen:
            seen.add(key)
            logger.warning(
                "%s: instructions reference {%s}, which is not in the session state; it is "
                "left as written (write {%s?} to render it as empty, or pass "
                "strict_templates=True to make this an error)",
                name or "agent",
                key,
                key,
            )
