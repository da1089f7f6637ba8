"""Typed answers: the schema a model is asked to answer in, and the check of its answer.

`OutputSchema(Triage)` takes a pydantic model, a dataclass, a TypedDict or a JSON Schema
dict. Its `spec` is what a provider sees in `RequestInfo.output` (a name, the JSON Schema,
whether the schema fits OpenAI's strict mode); `parse(text)` turns the model's answer into
the typed value or raises `OutputValidationError` naming the field and the reason, which
the run sends back to the model to try again.

Providers import this module only for `OutputSpec`; validation happens in the run.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any, Generic, TypeVar, cast, is_typeddict

from statewise.exceptions import ConfigurationError, OutputValidationError
from statewise.models.messages import FINAL_ANSWER_TOOL, OutputSpec

T = TypeVar("T")


class OutputSchema(Generic[T]):
    """An answer type and its check (see the module)."""

    def __init__(self, output_type: type[T] | dict[str, Any], *, name: str | None = None) -> None:
        self.output_type = output_type
        self._adapter: Any = None
        self._validator: Any = None
        if isinstance(output_type, dict):
            schema = copy.deepcopy(output_type)
            if schema.get("type") != "object":
                raise ConfigurationError(
                    "output_schema as a JSON Schema must describe an object "
                    '({"type": "object", "properties": {...}}): providers answer with objects'
                )
            try:
                import jsonschema
            except ImportError as exc:  # pragma: no cover - a dependency of the package
                from statewise.exceptions import MissingDependencyError

                raise MissingDependencyError("jsonschema", "all") from exc
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ConfigurationError(
                    f"output_schema is not a valid JSON Schema: {exc.message}"
                ) from None
            self._validator = jsonschema.Draft202012Validator(schema)
            title = str(schema.get("title") or name or "answer")
        else:
            if not (
                isinstance(output_type, type)
                and (
                    _is_pydantic_model(output_type)
                    or dataclasses.is_dataclass(output_type)
                    or is_typeddict(output_type)
                )
            ):
                raise ConfigurationError(
                    "output_schema must be a pydantic model, a dataclass, a TypedDict or a "
                    f"JSON Schema dict, not {output_type!r}"
                )
            self._adapter = _adapter_for(output_type)
            schema = self._adapter.json_schema()
            title = name or output_type.__name__
        self.returns_dict = self._validator is not None or is_typeddict(output_type)
        self.spec = OutputSpec(
            name=_tool_name(title),
            json_schema=schema,
            description=schema.get("description"),
            strict=fits_strict(schema),
        )

    @property
    def title(self) -> str:
        return self.spec.name

    def parse(self, text: str) -> T:
        """The typed value of an answer given as JSON text (a fenced ```json block is
        accepted too), or `OutputValidationError`."""
        raw = _unfence(text)
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OutputValidationError(
                self.title,
                [("", f"the answer is not JSON ({exc.msg} at character {exc.pos})")],
            ) from None
        return self.validate(data)

    def validate(self, data: Any) -> T:
        """The typed value of already decoded JSON, or `OutputValidationError`."""
        if self._validator is not None:
            problems = [
                (_path(e.absolute_path), e.message)
                for e in sorted(self._validator.iter_errors(data), key=lambda e: list(e.path))
            ]
            if problems:
                raise OutputValidationError(self.title, problems)
            return cast(T, data)
        from pydantic import ValidationError

        try:
            return cast(T, self._adapter.validate_python(data))
        except ValidationError as exc:
            raise OutputValidationError(
                self.title,
                [(_path(e["loc"]), _reason(dict(e))) for e in exc.errors(include_url=False)],
            ) from None

    def to_json(self, value: Any) -> Any:
        """A validated value as plain JSON (for state, storage and HTTP)."""
        if self._adapter is None:
            return value
        return self._adapter.dump_python(value, mode="json")


def _adapter_for(tp: type) -> Any:
    """pydantic's adapter for `tp`. A `typing.TypedDict` (which pydantic refuses before
    Python 3.12) is rebuilt as a `typing_extensions` one with the same keys."""
    from pydantic import PydanticUserError, TypeAdapter

    try:
        return TypeAdapter(tp)
    except PydanticUserError as exc:
        if exc.code != "typed-dict-version" or not is_typeddict(tp):
            raise
    import typing

    import typing_extensions

    hints = typing.get_type_hints(tp, include_extras=True)
    required = getattr(tp, "__required_keys__", frozenset(hints))
    keys = {k: v if k in required else typing_extensions.NotRequired[v] for k, v in hints.items()}
    rebuilt: Any = typing_extensions.TypedDict(tp.__name__, keys)  # type: ignore[misc]
    rebuilt.__doc__ = tp.__doc__
    try:
        return TypeAdapter(rebuilt)
    except PydanticUserError as exc:
        raise ConfigurationError(
            f"output_schema {tp.__name__}: {exc} (nested TypedDicts: import TypedDict from "
            "typing_extensions)"
        ) from None


def _is_pydantic_model(tp: type) -> bool:
    from pydantic import BaseModel

    return issubclass(tp, BaseModel)


def _tool_name(title: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64]
    return name or "answer"


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _reason(error: dict[str, Any]) -> str:
    message = str(error.get("msg", "invalid"))
    if "input" in error and error.get("type") != "missing":
        shown = json.dumps(error["input"], ensure_ascii=False, default=str)
        if len(shown) > 80:
            shown = shown[:79] + "…"
        message += f" (got {shown})"
    return message


def _unfence(text: str) -> str:
    stripped = text.strip()
    match = re.fullmatch(r"```(?:json)?\s*\n(.*)\n\s*```", stripped, re.DOTALL)
    return match.group(1) if match else stripped


_STRICT_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "$ref", "$defs", "description", "title", "default", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems",
    "maxItems",
}  # fmt: skip


def fits_strict(schema: dict[str, Any]) -> bool:
    """Whether `schema` can be sent as OpenAI strict structured output unchanged: every
    object lists all its properties as required and forbids others, and no keyword
    outside the supported subset appears."""

    def walk(node: Any) -> bool:
        if isinstance(node, list):
            return all(walk(n) for n in node)
        if not isinstance(node, dict):
            return True
        if set(node) - _STRICT_KEYWORDS:
            return False
        if node.get("type") == "object" or "properties" in node:
            props = node.get("properties", {})
            if set(node.get("required", [])) != set(props):
                return False
            if node.get("additionalProperties", True) is not False:
                return False
        if "default" in node:
            return False
        children = [*node.get("properties", {}).values(), *node.get("$defs", {}).values()]
        for key in ("items", "anyOf"):
            if key in node:
                children.append(node[key])
        return all(walk(c) for c in children)

    return walk(schema)


def example_for(schema: dict[str, Any]) -> Any:
    """A small value that fits `schema` (what `TestModel` answers): the first enum value,
    the first branch of a union, required properties only, empty lists."""
    defs = schema.get("$defs", {})

    def make(node: dict[str, Any], depth: int = 0) -> Any:
        if depth > 20:
            return None
        if "$ref" in node:
            return make(defs[node["$ref"].rsplit("/", 1)[-1]], depth + 1)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return node["enum"][0]
        if "default" in node:
            return copy.deepcopy(node["default"])
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node:
                return make(node[key][0], depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or "properties" in node:
            props = node.get("properties", {})
            return {k: make(props[k], depth + 1) for k in node.get("required", []) if k in props}
        if kind == "array":
            return (
                [make(node["items"], depth + 1)] * node.get("minItems", 0)
                if "items" in node
                else []
            )
        if kind == "string":
            return "a" * max(1, int(node.get("minLength", 1)))
        if kind == "integer":
            return int(node.get("minimum", 0))
        if kind == "number":
            return float(node.get("minimum", 0))
        if kind == "boolean":
            return False
        return None

    return make(schema)


__all__ = ["FINAL_ANSWER_TOOL", "OutputSchema", "OutputSpec", "example_for", "fits_strict"]
