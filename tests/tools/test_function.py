"""Function.from_callable: schemas from hints, defaults and docstrings; validation; calls."""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from statewise.exceptions import ConfigurationError
from statewise.models.messages import ToolDefinition
from statewise.tools import INJECTABLE_NAMES, Function, ToolArgumentsError, tool

if TYPE_CHECKING:  # never importable at run time: injected params must not need it
    from statewise.agent import Agent  # type: ignore[attr-defined]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    city: str
    zip_code: str | None = None


pytestmark = pytest.mark.anyio


def props(fn: Function) -> dict[str, Any]:
    return fn.parameters["properties"]  # type: ignore[no-any-return]


# -- schema -------------------------------------------------------------------------------


def test_plain_types_and_required() -> None:
    def f(a: int, b: float, c: str, d: bool) -> None:
        """Do things."""

    fn = Function.from_callable(f)
    assert fn.name == "f"
    assert fn.description == "Do things."
    assert fn.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "number"},
            "c": {"type": "string"},
            "d": {"type": "boolean"},
        },
        "required": ["a", "b", "c", "d"],
        "additionalProperties": False,
    }


def test_optional_and_defaults() -> None:
    def f(a: int | None, b: str = "x", c: int | None = None) -> None: ...

    fn = Function.from_callable(f)
    assert props(fn) == {
        "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "b": {"type": "string", "default": "x"},
        "c": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    }
    assert fn.parameters["required"] == ["a"]


def test_literal_and_enum() -> None:
    def f(mode: Literal["fast", "slow"], color: Color = Color.RED) -> None: ...

    fn = Function.from_callable(f)
    assert props(fn)["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert props(fn)["color"]["$ref"] == "#/$defs/Color"
    assert fn.parameters["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert fn.validate_arguments({"mode": "fast", "color": "blue"})["color"] is Color.BLUE


def test_list_and_nested_model() -> None:
    def f(tags: list[str], address: Address) -> None: ...

    fn = Function.from_callable(f)
    assert props(fn)["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props(fn)["address"] == {"$ref": "#/$defs/Address"}
    assert fn.parameters["$defs"]["Address"]["required"] == ["city"]
    values = fn.validate_arguments({"tags": ["a"], "address": {"city": "Oslo"}})
    assert values["address"] == Address(city="Oslo")


def test_google_docstring() -> None:
    def f(item: str, qty: int = 1) -> str:
        """Add an item to the list.

        Keeps the list unique.

        Args:
            item (str): The item
                to add.
            qty: How many.

        Returns:
            A confirmation.
        """
        return item

    fn = Function.from_callable(f)
    assert fn.description == "Add an item to the list.\n\nKeeps the list unique."
    assert props(fn)["item"]["description"] == "The item\nto add."
    assert props(fn)["qty"]["description"] == "How many."


def test_numpy_docstring() -> None:
    def f(item: str, qty: int = 1) -> str:
        """Add an item.

        Parameters
        ----------
        item : str
            The item.
        qty : int, optional
            How many.
        """
        return item

    fn = Function.from_callable(f)
    assert fn.description == "Add an item."
    assert props(fn)["item"]["description"] == "The item."
    assert props(fn)["qty"]["description"] == "How many."


def test_explicit_name_and_description_win() -> None:
    def f(x: int) -> None:
        """Docstring."""

    fn = Function.from_callable(f, name="other", description="Explicit.")
    assert (fn.name, fn.description) == ("other", "Explicit.")


def test_field_metadata_is_kept_and_beats_the_docstring() -> None:
    def f(n: Annotated[int, Field(ge=1, description="At least one.")], m: int = Field(2)) -> None:
        """F.

        Args:
            n: From the docstring.
            m: M from the docstring.
        """

    fn = Function.from_callable(f)
    assert props(fn)["n"] == {"type": "integer", "minimum": 1, "description": "At least one."}
    assert props(fn)["m"] == {
        "type": "integer",
        "default": 2,
        "description": "M from the docstring.",
    }


def test_unannotated_params_accept_anything() -> None:
    def add_item(session_state, item, qty=1):  # type: ignore[no-untyped-def]
        """Add an item to the shopping list."""

    fn = Function.from_callable(add_item)
    assert props(fn) == {"item": {}, "qty": {"default": 1}}
    assert fn.injected == frozenset({"session_state"})
    assert fn.validate_arguments({"item": {"any": "thing"}}) == {"item": {"any": "thing"}, "qty": 1}


def test_injected_params_are_left_out_even_with_unresolvable_hints() -> None:
    def f(agent: Agent, run_context: RunContext, customer_id: str) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    fn = Function.from_callable(f)
    assert list(props(fn)) == ["customer_id"]
    assert fn.injected == frozenset({"agent", "run_context"})


def test_every_injectable_name_is_injected() -> None:
    assert {"run_context", "session_state", "agent", "tool_context"} <= INJECTABLE_NAMES

    for name in INJECTABLE_NAMES:
        ns: dict[str, Any] = {}
        exec(f"def g({name}, x: int): pass", ns)
        assert Function.from_callable(ns["g"]).injected == frozenset({name})


def test_unresolvable_hint_on_a_model_param_names_it() -> None:
    def f(x: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ConfigurationError, match=r"tool 'f'.*parameter 'x'.*Missing"):
        Function.from_callable(f)


def test_bound_method_drops_self() -> None:
    class Tools:
        def lookup(self, key: str) -> str:
            """Look a key up."""
            return key.upper()

    fn = Function.from_callable(Tools().lookup)
    assert (fn.name, list(props(fn))) == ("lookup", ["key"])
    assert fn.description == "Look a key up."


def test_async_function() -> None:
    async def fetch(url: str) -> str:
        return url

    fn = Function.from_callable(fetch)
    assert fn.is_async
    assert not Function.from_callable(lambda x: x, name="sync").is_async


def test_partial_and_callable_object() -> None:
    def scale(x: int, factor: int) -> int:
        """Scale x."""
        return x * factor

    class Doubler:
        async def __call__(self, x: int) -> int:
            return 2 * x

    partial = Function.from_callable(functools.partial(scale, factor=3))
    assert (partial.name, partial.description) == ("scale", "Scale x.")
    doubler = Function.from_callable(Doubler())
    assert (doubler.name, doubler.is_async) == ("Doubler", True)


def test_names_clashing_with_basemodel_attributes_work() -> None:
    def f(json: str, model_name: str, copy: int = 0) -> None: ...

    fn = Function.from_callable(f)
    assert list(props(fn)) == ["json", "model_name", "copy"]
    assert fn.validate_arguments({"json": "j", "model_name": "m"}) == {
        "json": "j",
        "model_name": "m",
        "copy": 0,
    }


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(x, /): pass", "positional-only"),
        ("def f(*xs): pass", r"\*args"),
        ("def f(**kw): pass", r"\*\*kwargs"),
    ],
)
def test_unsupported_parameter_kinds(source: str, message: str) -> None:
    ns: dict[str, Any] = {}
    exec(source, ns)
    with pytest.raises(ConfigurationError, match=message):
        Function.from_callable(ns["f"])


def test_bad_names_and_non_callables() -> None:
    with pytest.raises(ConfigurationError, match="'<lambda>'"):
        Function.from_callable(lambda: None)
    with pytest.raises(ConfigurationError, match="must be callable, got int"):
        Function.from_callable(3)  # type: ignore[arg-type]


class Opaque:
    """A type pydantic has no schema for."""


def test_types_pydantic_cannot_handle_are_configuration_errors() -> None:
    def f(x: Opaque) -> None: ...

    with pytest.raises(ConfigurationError, match="tool 'f': cannot build a schema"):
        Function.from_callable(f)


def test_definition() -> None:
    def f(x: int) -> None:
        """Doc."""

    fn = Function.from_callable(f)
    assert fn.definition() == ToolDefinition(name="f", description="Doc.", parameters=fn.parameters)


def test_definition_is_made_once_and_again_after_a_rename() -> None:
    """Every model request of every run asks for the tool's definition: it is made once,
    and made again only when the tool was renamed since."""

    def f(x: int) -> None:
        """Doc."""

    fn = Function.from_callable(f)
    first = fn.definition()
    assert fn.definition() is first
    fn.name = "g"
    assert fn.definition() == ToolDefinition(name="g", description="Doc.", parameters=fn.parameters)
    assert fn.definition() is fn.definition()


# -- validation ---------------------------------------------------------------------------


def add_item(session_state: dict[str, Any], item: str, qty: int = 1) -> str:
    """Add an item to the shopping list."""
    session_state.setdefault("shopping_list", []).extend([item] * qty)
    return f"The shopping list is now {session_state['shopping_list']}"


def test_validation_coerces_and_fills_defaults() -> None:
    fn = Function.from_callable(add_item)
    assert fn.validate_arguments({"item": "milk", "qty": "3"}) == {"item": "milk", "qty": 3}


def test_validation_error_names_each_argument() -> None:
    fn = Function.from_callable(add_item)
    with pytest.raises(ToolArgumentsError) as info:
        fn.validate_arguments({"qty": "many", "colour": "red"})
    message = str(info.value)
    assert message.startswith("Invalid arguments for tool 'add_item': ")
    assert "item: field required" in message
    assert "qty: input should be a valid integer" in message and "'many'" in message
    assert "extra argument 'colour' is not accepted" in message
    assert info.value.tool_name == "add_item" and len(info.value.problems) == 3


def test_validation_of_the_brief_example() -> None:
    fn = Function.from_callable(add_item)
    with pytest.raises(ToolArgumentsError) as info:
        fn.validate_arguments({"qty": 2, "extra_qty": 1})
    assert str(info.value) == (
        "Invalid arguments for tool 'add_item': item: field required; "
        "extra argument 'extra_qty' is not accepted"
    )


def test_nested_errors_use_a_dotted_path() -> None:
    def f(address: Address) -> None: ...

    with pytest.raises(ToolArgumentsError, match=r"address\.city: field required"):
        Function.from_callable(f).validate_arguments({"address": {}})


def test_non_object_arguments() -> None:
    with pytest.raises(ToolArgumentsError, match="arguments must be a JSON object, got"):
        Function.from_callable(add_item).validate_arguments(["milk"])  # type: ignore[arg-type]


def test_injected_names_cannot_be_set_by_the_model() -> None:
    with pytest.raises(ToolArgumentsError, match="extra argument 'session_state'"):
        Function.from_callable(add_item).validate_arguments({"item": "x", "session_state": {}})


# -- calling ------------------------------------------------------------------------------


async def test_call_injects_declared_values_only() -> None:
    state: dict[str, Any] = {}
    fn = Function.from_callable(add_item)
    result = await fn.call({"item": "milk", "qty": 2}, {"session_state": state, "agent": object()})
    assert result == "The shopping list is now ['milk', 'milk']"
    assert state == {"shopping_list": ["milk", "milk"]}


async def test_missing_injectable_is_none_unless_defaulted() -> None:
    def f(run_context: Any, agent: Any = "default", x: int = 0) -> tuple[Any, Any]:
        return run_context, agent

    fn = Function.from_callable(f)
    assert await fn.call({}, {}) == (None, "default")
    assert await fn.call({}, {"agent": 1, "run_context": 2}) == (2, 1)


async def test_call_awaits_async_functions() -> None:
    async def fetch(url: str) -> str:
        return f"got {url}"

    assert await Function.from_callable(fetch).call({"url": "u"}, {}) == "got u"


async def test_call_awaits_async_functions_behind_sync_wrappers() -> None:
    async def fetch(url: str) -> str:
        return f"got {url}"

    @functools.wraps(fetch)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fetch(*args, **kwargs)

    fn = Function.from_callable(wrapper)
    assert not fn.is_async
    assert await fn.call({"url": "u"}, {}) == "got u"


async def test_call_validates_before_calling() -> None:
    calls: list[int] = []

    def f(x: int) -> None:
        calls.append(x)

    with pytest.raises(ToolArgumentsError):
        await Function.from_callable(f).call({"x": "nope"}, {})
    assert calls == []


async def test_call_propagates_tool_exceptions() -> None:
    def f() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await Function.from_callable(f).call({}, {})


# -- @tool --------------------------------------------------------------------------------


def test_tool_decorator_both_forms_stay_callable() -> None:
    @tool
    def double(x: int) -> int:
        """Double x."""
        return 2 * x

    @tool(name="triple_it", description="Triple.")
    def triple(x: int) -> int:
        return 3 * x

    assert isinstance(double, Function) and isinstance(triple, Function)
    assert (double.name, double.description) == ("double", "Double x.")
    assert (triple.name, triple.description) == ("triple_it", "Triple.")
    assert double(2) == 4 and triple(x=2) == 6


def test_from_callable_of_a_function_returns_it_or_a_renamed_copy() -> None:
    fn = Function.from_callable(add_item)
    assert Function.from_callable(fn) is fn
    renamed = Function.from_callable(fn, name="add")
    assert (renamed.name, fn.name) == ("add", "add_item")
    assert renamed.parameters is fn.parameters


# -- lazy schemas, cached per function ----------------------------------------------------


def test_lazy_function_defers_type_problems_until_the_schema_is_needed() -> None:
    def f(x: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    fn = Function.from_callable(f, lazy=True)  # the eager form raises here (test above)
    assert fn.name == "f"
    with pytest.raises(ConfigurationError, match=r"tool 'f'.*parameter 'x'.*Missing"):
        fn.definition()
    with pytest.raises(ConfigurationError, match=r"tool 'f'.*parameter 'x'.*Missing"):
        fn.validate_arguments({"x": 1})


def test_lazy_function_still_refuses_what_a_model_cannot_call_at_once() -> None:
    ns: dict[str, Any] = {}
    exec("def f(*xs): pass", ns)
    with pytest.raises(ConfigurationError, match=r"\*args"):
        Function.from_callable(ns["f"], lazy=True)
    with pytest.raises(ConfigurationError, match="'<lambda>'"):
        Function.from_callable(lambda: None, lazy=True)


def test_schema_is_built_once_per_function_object() -> None:
    def f(x: int, y: str = "a") -> None:
        """Doc."""

    first = Function.from_callable(f, lazy=True)
    second = Function.from_callable(f, lazy=True)
    assert first is not second
    assert first.parameters is second.parameters  # one schema, shared
    renamed = Function.from_callable(f, name="g", description="Other.")
    assert renamed.parameters is first.parameters
    assert (renamed.name, renamed.description, first.description) == ("g", "Other.", "Doc.")


def test_bound_methods_of_different_instances_share_one_schema_and_keep_their_self() -> None:
    class Tools:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def lookup(self, key: str) -> str:
            """Look a key up."""
            return self.tag + key

    a = Function.from_callable(Tools("a").lookup, lazy=True)
    b = Function.from_callable(Tools("b").lookup, lazy=True)
    assert a.parameters is b.parameters
    assert list(props(a)) == ["key"]
    assert (a.invoke({"key": "k"}, {}), b.invoke({"key": "k"}, {})) == ("ak", "bk")


def test_an_agent_builds_its_tool_schemas_at_the_first_run_not_at_construction() -> None:
    from statewise import Agent
    from statewise.models import TestModel

    def f(x: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    agent = Agent(model=TestModel(), tools=[f])  # built per request: no schema work here
    with pytest.raises(ConfigurationError, match=r"tool 'f'.*parameter 'x'.*Missing"):
        agent.run("go")
