"""Declared state: validation per written key, merge rules and secret keys from types.

    class MyState(BaseModel):
        count: Annotated[int, Reducer("sum")] = 0
        api_token: Annotated[str, Secret()] | None = None
        user_name: str = Field("", alias="user:name")   # scoped keys: use an alias

A TypedDict works too; scoped keys need the functional form:
`TypedDict("MyState", {"user:name": str, "count": Annotated[int, Reducer("sum")]})`.
Only top-level keys are validated, and only the keys a commit touched (O(change)).
Keys the schema does not declare are allowed.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, Required, get_args, get_origin, is_typeddict

from pydantic import BaseModel, TypeAdapter, ValidationError

from statewise.exceptions import ConfigurationError, StateValidationError
from statewise.state.reducers import Rule, resolve_rule

__all__ = ["Reducer", "Secret", "StateSchema"]


@dataclass(frozen=True, slots=True)
class Reducer:
    """`Annotated[int, Reducer("sum")]`: how concurrent writes to this key merge."""

    rule: Any


@dataclass(frozen=True, slots=True)
class Secret:
    """`Annotated[str, Secret()]`: encrypted at rest, redacted in logs and exports."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Field:
    adapter: TypeAdapter[Any]
    required: bool
    metadata: tuple[Any, ...]
    default: Any = None
    has_default: bool = False


def _reason(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"])
        parts.append(f"{loc}: {item['msg']}" if loc else item["msg"])
    return "; ".join(parts)


def _unwrap(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    metadata: tuple[Any, ...] = ()
    while True:
        origin = get_origin(tp)
        if origin in (Required, NotRequired):
            tp = get_args(tp)[0]
        elif origin is typing.Annotated:
            metadata += tuple(tp.__metadata__)
            tp = tp.__origin__
        else:
            return tp, metadata


class StateSchema:
    """Validation and per-key metadata for a declared state type."""

    def __init__(self, tp: Any, fields: dict[str, _Field]) -> None:
        self.type = tp
        self._fields = fields
        # Whole-object validation (model validators) only for models: pydantic refuses a
        # `typing.TypedDict` on Python < 3.12, and per-key checks cover TypedDicts fully.
        self._whole: TypeAdapter[Any] | None = (
            TypeAdapter(tp) if isinstance(tp, type) and issubclass(tp, BaseModel) else None
        )

    @classmethod
    def from_type(cls, tp: Any) -> StateSchema:
        """Build from a pydantic model class or a TypedDict (anything else: an error)."""
        fields: dict[str, _Field] = {}
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            for name, info in tp.model_fields.items():
                key = info.alias or name
                annotated: Any = info.annotation
                if info.metadata:
                    annotated = typing.Annotated[(info.annotation, *info.metadata)]
                _, extra = _unwrap(info.annotation)
                required = info.is_required()
                fields[key] = _Field(
                    adapter=TypeAdapter(annotated),
                    required=required,
                    metadata=(*info.metadata, *extra),
                    default=None if required else info.get_default(call_default_factory=True),
                    has_default=not required,
                )
        elif is_typeddict(tp):
            hints = typing.get_type_hints(tp, include_extras=True)
            for key, hint in hints.items():
                inner, metadata = _unwrap(hint)
                fields[key] = _Field(
                    adapter=TypeAdapter(inner),
                    required=key in tp.__required_keys__,
                    metadata=metadata,
                )
        else:
            raise ConfigurationError(
                f"state_schema must be a pydantic BaseModel subclass or a TypedDict, got {tp!r}"
            )
        return cls(tp, fields)

    def defaults(self) -> dict[str, Any]:
        """JSON-mode defaults of the fields that have one (the template for new sessions)."""
        return {
            key: f.adapter.dump_python(f.default, mode="json")
            for key, f in self._fields.items()
            if f.has_default
        }

    def validate_keys(self, state: Mapping[str, Any], keys: Iterable[str]) -> None:
        """Validate only these top-level keys (the ones a commit touched)."""
        for key in keys:
            f = self._fields.get(key)
            if f is None:
                continue
            if key not in state:
                if f.required:
                    raise StateValidationError(key, "this key is required but is missing")
                continue
            try:
                f.adapter.validate_python(state[key])
            except ValidationError as error:
                raise StateValidationError(key, _reason(error)) from None

    def missing_required(self, state: Mapping[str, Any]) -> list[str]:
        """The required keys `state` lacks, in declaration order."""
        return [key for key, f in self._fields.items() if f.required and key not in state]

    def validate_all(self, state: Mapping[str, Any]) -> None:
        """Validate the whole state (also runs model-level validators)."""
        self.validate_keys(state, self._fields)
        if self._whole is None:
            return
        try:
            self._whole.validate_python(dict(state))
        except ValidationError as error:
            first = error.errors()[0]["loc"]
            raise StateValidationError(str(first[0]) if first else "", _reason(error)) from None

    def rules(self) -> dict[str, Rule]:
        """Merge rules declared with `Annotated[..., Reducer(rule)]`."""
        return {
            key: resolve_rule(marker.rule)
            for key, f in self._fields.items()
            for marker in f.metadata
            if isinstance(marker, Reducer)
        }

    def secret_keys(self) -> frozenset[str]:
        """Keys declared with `Annotated[..., Secret()]`."""
        return frozenset(
            key for key, f in self._fields.items() if any(isinstance(m, Secret) for m in f.metadata)
        )
