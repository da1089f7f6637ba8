"""Build the pydantic model behind a tool: its JSON schema and its argument validator.

One model per tool function, built the first time it is needed (see `Function`). Its fields get internal names (`p0`, `p1`, ...) and the
parameter names as aliases, so that any parameter name works, including ones that would
clash with `BaseModel` attributes (`json`, `copy`, `model_name`, ...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, get_origin

from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import CoreSchema

from statewise.exceptions import ConfigurationError
from statewise.tools._introspect import resolve_annotation

_UNSUPPORTED_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional-only",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


class _ToolJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON schema without per-field titles: noise that costs tokens."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class ArgumentsModel:
    """The validator of a tool's arguments and the JSON schema the model sees."""

    validator: type[BaseModel]
    fields: tuple[tuple[str, str], ...]
    """(model field name, parameter name) for every parameter the model fills."""
    json_schema: dict[str, Any]


def check_parameter_kinds(params: list[inspect.Parameter], what: str) -> None:
    """Refuse parameters a model cannot fill by name (cheap: runs when a tool is made)."""
    for param in params:
        if param.kind in _UNSUPPORTED_KINDS:
            raise ConfigurationError(
                f"{what}: parameter {param.name!r} is {_UNSUPPORTED_KINDS[param.kind]}; "
                "a model passes tool arguments by name, so use keyword parameters"
            )


def build_arguments_model(
    fn: Callable[..., Any],
    params: list[inspect.Parameter],
    injected: frozenset[str],
    descriptions: dict[str, str],
    tool_name: str,
) -> ArgumentsModel:
    what = f"tool {tool_name!r}"
    definitions: dict[str, Any] = {}
    fields: list[tuple[str, str]] = []
    check_parameter_kinds(params, what)
    for param in params:
        if param.name in injected:
            continue
        field_name = f"p{len(fields)}"
        annotation = resolve_annotation(fn, param, what)
        info = Field(alias=param.name)
        if param.name in descriptions:
            info = Field(alias=param.name, description=descriptions[param.name])
        default = ... if param.default is param.empty else param.default
        definitions[field_name] = (_with_field_info(annotation, info), default)
        fields.append((field_name, param.name))
    try:
        validator: type[BaseModel] = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **definitions,
        )
        schema = validator.model_json_schema(schema_generator=_ToolJsonSchema)
    except (PydanticUserError, TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{what}: cannot build a schema for its parameters: {exc}"
        ) from exc
    schema.pop("title", None)
    return ArgumentsModel(validator=validator, fields=tuple(fields), json_schema=schema)


def _with_field_info(annotation: Any, info: FieldInfo) -> Any:
    """`Annotated[annotation, info]`, with `info` placed before the user's own metadata.

    Pydantic lets later metadata win, so a description given with `Annotated[...,
    Field(description=...)]` beats the docstring's, and an `= Field(...)` default beats both.
    """
    if get_origin(annotation) is Annotated:
        return Annotated[(annotation.__origin__, info, *annotation.__metadata__)]
    return Annotated[annotation, info]
