"""Typed answers, the pure part: every kind of output_schema gives a JSON Schema and a check
that names the failing field and the reason; strict-mode fitness; example answers."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypedDict

import pytest
from pydantic import BaseModel, Field

from statewise.exceptions import ConfigurationError, OutputValidationError
from statewise.models.structured import OutputSchema, example_for, fits_strict


class Triage(BaseModel):
    """How urgent a ticket is."""

    priority: Literal["low", "high"]
    summary: str = Field(min_length=3)
    tags: list[str]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


JSON_SCHEMA = {
    "type": "object",
    "title": "Verdict",
    "properties": {"ok": {"type": "boolean"}, "score": {"type": "number", "minimum": 0}},
    "required": ["ok", "score"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("kind", "good", "expected"),
    [
        (Triage, '{"priority": "high", "summary": "disk full", "tags": []}', Triage),
        (Point, '{"x": 1, "y": 2}', Point),
        (Movie, '{"title": "Heat", "year": 1995}', dict),
        (JSON_SCHEMA, '{"ok": true, "score": 0.5}', dict),
    ],
    ids=["pydantic", "dataclass", "typeddict", "json-schema"],
)
def test_each_kind_parses_a_good_answer_into_its_type(
    kind: object, good: str, expected: type
) -> None:
    schema: OutputSchema[Any] = OutputSchema(kind)  # type: ignore[arg-type]
    value = schema.parse(good)
    assert isinstance(value, expected)
    assert schema.spec.json_schema["type"] == "object"
    assert schema.returns_dict == (expected is dict)
    assert schema.parse(f"```json\n{good}\n```") == value  # a fenced answer is fine


def test_a_bad_answer_names_the_field_and_the_reason() -> None:
    schema = OutputSchema(Triage)
    with pytest.raises(OutputValidationError) as caught:
        schema.parse('{"priority": "urgent", "summary": "x"}')
    problems = dict(caught.value.problems)
    assert "priority" in problems and "'low' or 'high'" in problems["priority"]
    assert '(got "urgent")' in problems["priority"]
    assert "summary" in problems and "at least 3" in problems["summary"]
    assert problems["tags"] == "Field required"
    assert str(caught.value).startswith("the answer does not fit Triage: priority: ")
    with pytest.raises(OutputValidationError, match="not JSON"):
        schema.parse("I think it is urgent")
    nested: OutputSchema[Any] = OutputSchema(JSON_SCHEMA)
    with pytest.raises(OutputValidationError, match=r"score: -1 is less than the minimum of 0"):
        nested.parse('{"ok": true, "score": -1}')


def test_to_json_gives_plain_json() -> None:
    schema: OutputSchema[Point] = OutputSchema(Point)
    assert schema.to_json(schema.parse('{"x": 1, "y": 2}')) == {"x": 1, "y": 2}


def test_bad_schemas_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="pydantic model, a dataclass"):
        OutputSchema(int)
    with pytest.raises(ConfigurationError, match="must describe an object"):
        OutputSchema({"type": "string"})
    with pytest.raises(ConfigurationError, match="not a valid JSON Schema"):
        OutputSchema({"type": "object", "properties": {"a": {"type": "nonsense"}}})


def test_strict_fitness() -> None:
    assert fits_strict(JSON_SCHEMA)
    assert OutputSchema(JSON_SCHEMA).spec.strict
    assert not OutputSchema(Triage).spec.strict  # min_length, and a default-free extra
    loose = dict(JSON_SCHEMA, required=["ok"])
    assert not fits_strict(loose)
    assert not fits_strict({k: v for k, v in JSON_SCHEMA.items() if k != "additionalProperties"})


@pytest.mark.parametrize("kind", [Triage, Point, Movie, JSON_SCHEMA])
def test_an_example_answer_fits_its_schema(kind: object) -> None:
    schema: OutputSchema[Any] = OutputSchema(kind)  # type: ignore[arg-type]
    schema.validate(example_for(schema.spec.json_schema))
