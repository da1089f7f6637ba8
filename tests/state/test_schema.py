from typing import Annotated, Any, NotRequired, TypedDict

import pytest
from pydantic import BaseModel, Field

from statewise.exceptions import ConfigurationError, StateValidationError
from statewise.state.reducers import resolve_rule
from statewise.state.schema import Reducer, Secret, StateSchema


class Model(BaseModel):
    count: Annotated[int, Reducer("sum")] = 0
    token: Annotated[str | None, Secret()] = None
    name: str
    user_name: str = Field("anon", alias="user:name")
    tags: list[str] = Field(default_factory=list)


TD = TypedDict(
    "TD",
    {
        "user:name": str,
        "count": Annotated[int, Reducer("max")],
        "pw": NotRequired[Annotated[str, Secret()]],
    },
)


def test_model_schema() -> None:
    schema = StateSchema.from_type(Model)
    assert schema.defaults() == {"count": 0, "token": None, "user:name": "anon", "tags": []}
    assert schema.rules() == {"count": resolve_rule("sum")}
    assert schema.secret_keys() == frozenset({"token"})
    schema.validate_keys({"count": 1, "other": object()}, ["count", "other"])
    with pytest.raises(StateValidationError) as info:
        schema.validate_keys({"count": "many"}, ["count"])
    assert info.value.key == "count" and "valid integer" in info.value.reason
    with pytest.raises(StateValidationError, match="'name': this key is required"):
        schema.validate_keys({}, ["name"])
    with pytest.raises(StateValidationError, match="'user:name'"):
        schema.validate_keys({"user:name": 5}, ["user:name"])
    schema.validate_all({"name": "x", "count": 2})
    with pytest.raises(StateValidationError, match=r"'tags'.*0"):
        schema.validate_all({"name": "x", "tags": [1]})


def test_typeddict_schema() -> None:
    schema = StateSchema.from_type(TD)
    assert schema.rules() == {"count": resolve_rule("max")}
    assert schema.secret_keys() == frozenset({"pw"})
    assert schema.defaults() == {}
    schema.validate_keys({"count": 1}, ["count", "pw"])
    with pytest.raises(StateValidationError, match="'user:name'"):
        schema.validate_keys({}, ["user:name"])


@pytest.mark.parametrize("bad", [dict, int, "x"])
def test_rejects_other_types(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="BaseModel subclass or a TypedDict"):
        StateSchema.from_type(bad)
