"""`Function`: a Python callable as a tool a model can call.

All the inspection (signature, type hints, docstring, pydantic model) happens once, in
`Function.from_callable`. `call` is on the hot path of every run: it validates, injects
and calls, nothing else.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from statewise.exceptions import ConfigurationError
from statewise.models.messages import ToolDefinition
from statewise.tools._introspect import (
    callable_name,
    check_tool_name,
    fill_injected,
    is_async_callable,
    parameters_of,
    parse_docstring,
    split_injected,
)
from statewise.tools._schema import build_arguments_model
from statewise.tools.errors import ToolArgumentsError


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class Function:
    """A tool: what the model sees (name, description, parameters) and how to call it.

    `injected` holds the parameters the run fills in by name (`run_context`,
    `session_state`, `agent`, ...); they are not part of `parameters`. Treat `parameters`
    as read-only: it is shared by every definition handed to a model.

    `requires_confirmation` pauses the run before each call of this tool until a person
    approves, rejects or edits it (`agent.continue_run`).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    injected: frozenset[str]
    function: Callable[..., Any] = field(repr=False)
    is_async: bool
    _validator: type[BaseModel] = field(repr=False)
    _fields: tuple[tuple[str, str], ...] = field(repr=False)
    _injected_required: frozenset[str] = field(repr=False)
    requires_confirmation: bool = False

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_confirmation: bool | None = None,
    ) -> Function:
        """Build a tool from type hints, defaults and the docstring of `fn`.

        Unannotated parameters accept anything. Passing a `Function` returns it, renamed or
        redescribed if asked.
        """
        if isinstance(fn, Function):
            if name is None and description is None and requires_confirmation is None:
                return fn
            return dataclasses.replace(
                fn,
                name=fn.name if name is None else check_tool_name(name),
                description=fn.description if description is None else description,
                requires_confirmation=(
                    fn.requires_confirmation
                    if requires_confirmation is None
                    else requires_confirmation
                ),
            )
        if not callable(fn):
            raise ConfigurationError(f"a tool must be callable, got {type(fn).__name__}")
        tool_name = check_tool_name(name if name is not None else callable_name(fn))
        params = parameters_of(fn, f"tool {tool_name!r}")
        injected, injected_required = split_injected(params)
        doc_description, param_descriptions = parse_docstring(fn)
        model = build_arguments_model(fn, params, injected, param_descriptions, tool_name)
        return cls(
            name=tool_name,
            description=doc_description if description is None else description,
            parameters=model.json_schema,
            injected=injected,
            function=fn,
            is_async=is_async_callable(fn),
            _validator=model.validator,
            _fields=model.fields,
            _injected_required=injected_required,
            requires_confirmation=bool(requires_confirmation),
        )

    def definition(self) -> ToolDefinition:
        """The tool as a model sees it."""
        return ToolDefinition(
            name=self.name, description=self.description, parameters=self.parameters
        )

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the Python values the function expects, by parameter name.

        Raises `ToolArgumentsError`, whose message is meant for the model, naming every
        bad, missing or unexpected argument.
        """
        try:
            validated = self._validator.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(self.name, _problems(exc)) from None
        values = validated.__dict__
        return {param: values[field_name] for field_name, param in self._fields}

    def invoke(self, arguments: Mapping[str, Any], injected: Mapping[str, Any]) -> Any:
        """Validate, inject and call; for an async function, return its un-awaited coroutine.

        The one code path under both `call` and the synchronous hook chain.
        """
        kwargs = self.validate_arguments(arguments)
        fill_injected(kwargs, self.injected, self._injected_required, injected)
        return self.function(**kwargs)

    async def call(self, arguments: Mapping[str, Any], injected: Mapping[str, Any]) -> Any:
        """Run the tool for a model's tool call.

        Sync functions run inline, on the event loop's thread: session state is not
        thread-safe, and tools are expected to be quick. `injected` maps injectable names
        to values; the function gets only those it declares.
        """
        result = self.invoke(arguments, injected)
        # Awaitable results are awaited even if the function did not look async: a sync
        # decorator around an async function hides the marker `is_async` relies on.
        if inspect.isawaitable(result):
            result = await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the original function directly, so decorated tools stay plain functions."""
        return self.function(*args, **kwargs)


def _problems(exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"])
        if not loc:
            problems.append(f"arguments must be a JSON object, got {_short(error['input'])}")
        elif error["type"] == "missing":
            problems.append(f"{loc}: field required")
        elif error["type"] == "extra_forbidden":
            problems.append(f"extra argument {loc!r} is not accepted")
        else:
            message = error["msg"][:1].lower() + error["msg"][1:]
            problems.append(f"{loc}: {message} (got {_short(error['input'])})")
    return problems


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
