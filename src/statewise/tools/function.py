"""`Function`: a Python callable as a tool a model can call.

Making a `Function` is cheap: it reads the callable's name and signature, nothing more. The
expensive part (type hints, docstring, the pydantic model and JSON schema) is built the
first time the tool is described to a model or called, and cached per function object, so
an agent built per request costs nothing extra. `call` is on the hot path of every run: it
validates, injects and calls, nothing else.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from statewise._workers import run_user_code
from statewise.exceptions import ConfigurationError
from statewise.models.messages import ToolDefinition
from statewise.tools._introspect import (
    TOOL_NAME,
    callable_name,
    check_tool_name,
    fill_injected,
    is_async_callable,
    parameters_of,
    parse_docstring,
    split_injected,
)
from statewise.tools._schema import build_arguments_model, check_parameter_kinds
from statewise.tools.errors import ToolArgumentsError


@dataclass(frozen=True, slots=True)
class _Schema:
    """What the model sees of a tool and the validator of its arguments (built lazily)."""

    description: str
    parameters: dict[str, Any]
    validator: type[BaseModel]
    fields: tuple[tuple[str, str], ...]


class _Inspection:
    """What reading one callable yields; shared by every `Function` made from it."""

    __slots__ = (
        "injected",
        "injected_required",
        "is_async",
        "name",
        "name_ok",
        "params",
        "schema",
    )

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.name = callable_name(fn)
        what = f"tool {self.name!r}"
        self.params = parameters_of(fn, what)
        check_parameter_kinds(self.params, what)
        self.injected, self.injected_required = split_injected(self.params)
        self.is_async = is_async_callable(fn)
        self.name_ok = TOOL_NAME.fullmatch(self.name) is not None
        self.schema: _Schema | None = None

    def build(self, fn: Callable[..., Any], tool_name: str) -> _Schema:
        """The schema, built on first use. A failure is raised again at every use (with the
        name the tool has there), never cached."""
        schema = self.schema
        if schema is None:
            description, param_descriptions = parse_docstring(fn)
            model = build_arguments_model(
                fn, self.params, self.injected, param_descriptions, tool_name
            )
            schema = self.schema = _Schema(
                description=description,
                parameters=model.json_schema,
                validator=model.validator,
                fields=model.fields,
            )
        return schema


# Per function object, weakly: plain functions by identity; bound methods by their function
# (the schema does not depend on `self`). Other callables (partials, callable objects) are
# inspected per Function, still lazily.
_functions: weakref.WeakKeyDictionary[Any, _Inspection] = weakref.WeakKeyDictionary()
_methods: weakref.WeakKeyDictionary[Any, _Inspection] = weakref.WeakKeyDictionary()


def _inspect(fn: Callable[..., Any]) -> _Inspection:
    if type(fn) is types.FunctionType:
        cache, key = _functions, fn
    elif type(fn) is types.MethodType and type(fn.__func__) is types.FunctionType:
        cache, key = _methods, fn.__func__
    else:
        return _Inspection(fn)
    found = cache.get(key)
    if found is None:
        found = cache[key] = _Inspection(fn)
    return found


class Function:
    """A tool: what the model sees (name, description, parameters) and how to call it.

    `injected` holds the parameters the run fills in by name (`run_context`,
    `session_state`, `agent`, ...); they are not part of `parameters`. Treat `parameters`
    as read-only: it is shared by every definition handed to a model.

    `requires_confirmation` pauses the run before each call of this tool until a person
    approves, rejects or edits it (`agent.continue_run`).
    """

    __slots__ = (
        "_definition",
        "_description",
        "_inspection",
        "function",
        "name",
        "requires_confirmation",
    )

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str,
        description: str | None,
        inspection: _Inspection,
        requires_confirmation: bool = False,
    ) -> None:
        self.function = function
        self.name = name
        self._description = description
        self._inspection = inspection
        self.requires_confirmation = requires_confirmation
        self._definition: ToolDefinition | None = None

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_confirmation: bool | None = None,
        lazy: bool = False,
    ) -> Function:
        """Build a tool from type hints, defaults and the docstring of `fn`.

        Unannotated parameters accept anything. Passing a `Function` returns it, renamed or
        redescribed if asked. With `lazy=True` the schema is built when the tool is first
        described or called (problems with type hints surface then); otherwise now.
        """
        if isinstance(fn, Function):
            if name is None and description is None and requires_confirmation is None:
                return fn
            return cls(
                fn.function,
                name=fn.name if name is None else check_tool_name(name),
                description=fn._description if description is None else description,
                inspection=fn._inspection,
                requires_confirmation=(
                    fn.requires_confirmation
                    if requires_confirmation is None
                    else requires_confirmation
                ),
            )
        if not callable(fn):
            raise ConfigurationError(f"a tool must be callable, got {type(fn).__name__}")
        inspection = _inspect(fn)
        if name is not None:
            tool_name = check_tool_name(name)
        elif inspection.name_ok:
            tool_name = inspection.name
        else:
            tool_name = check_tool_name(inspection.name)  # raises, naming the fix
        function = cls(
            fn,
            name=tool_name,
            description=description,
            inspection=inspection,
            requires_confirmation=bool(requires_confirmation),
        )
        if not lazy:
            function._schema()
        return function

    def _schema(self) -> _Schema:
        schema = self._inspection.schema
        if schema is None:
            schema = self._inspection.build(self.function, self.name)
        return schema

    @property
    def description(self) -> str:
        if self._description is not None:
            return self._description
        return self._schema().description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._schema().parameters

    @property
    def injected(self) -> frozenset[str]:
        return self._inspection.injected

    @property
    def is_async(self) -> bool:
        return self._inspection.is_async

    def __repr__(self) -> str:
        return f"Function(name={self.name!r}, injected={set(self.injected) or None})"

    def definition(self) -> ToolDefinition:
        """The tool as a model sees it; made once (every model request of every run asks),
        again only if the tool was renamed since."""
        definition = self._definition
        if definition is None or definition.name != self.name:
            definition = self._definition = ToolDefinition(
                name=self.name, description=self.description, parameters=self.parameters
            )
        return definition

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the Python values the function expects, by parameter name.

        Raises `ToolArgumentsError`, whose message is meant for the model, naming every
        bad, missing or unexpected argument.
        """
        schema = self._schema()
        try:
            # (the validator itself: `model_validate` only adds a Python call around it)
            validated = schema.validator.__pydantic_validator__.validate_python(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(self.name, _problems(exc)) from None
        values = validated.__dict__
        return {param: values[field_name] for field_name, param in schema.fields}

    def invoke(self, arguments: Mapping[str, Any], injected: Mapping[str, Any]) -> Any:
        """Validate, inject and call; for an async function, return its un-awaited coroutine.

        The one code path under both `call` and the synchronous hook chain.
        """
        kwargs = self.validate_arguments(arguments)
        inspection = self._inspection
        fill_injected(kwargs, inspection.injected, inspection.injected_required, injected)
        return self.function(**kwargs)

    async def call(
        self,
        arguments: Mapping[str, Any],
        injected: Mapping[str, Any],
    ) -> Any:
        """Run the tool for a model's tool call.

        A sync function is a blocking call (see `run_user_code`): on a shared event loop (a
        server, `arun` in user code) it runs in a worker thread, so a slow or blocking
        tool never stalls other runs; the run waits for it, so nothing else touches its
        session state meanwhile. `injected` maps injectable names to values; the function
        gets only those it declares.
        """
        if self.is_async:
            result = self.invoke(arguments, injected)
        else:
            result = await run_user_code(self.invoke, arguments, injected)
        # Awaitable results are awaited even if the function did not look async: a sync
        # decorator around an async function hides the marker `is_async` relies on.
        if not isinstance(result, str) and inspect.isawaitable(result):
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
