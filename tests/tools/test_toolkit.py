"""Toolkit, exactly as seed 000 uses it, and normalize_tools."""

# The seed's code is kept as written, untyped.
# mypy: disable-error-code="no-untyped-def, no-untyped-call"

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from statewise.exceptions import ConfigurationError
from statewise.tools import Function, Toolkit, call_with_hooks, normalize_tools, tool

if TYPE_CHECKING:
    from statewise.agent import Agent  # type: ignore[attr-defined]

pytestmark = pytest.mark.anyio


# -- seed 000, as written (logging dropped) -----------------------------------------------


class CustomerDBTools(Toolkit):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register(self.process_customer_request)

    def process_customer_request(
        self,
        agent: Agent,
        customer_id: str,
        action: str = "retrieve",
        name: str = "John Doe",
    ):
        return "This should not be seen."


@dataclass
class RunContext:
    session_state: dict[str, Any] | None = field(default_factory=dict)


def customer_management_hook(run_context: RunContext, arguments: dict[str, Any]):
    if run_context.session_state is None:
        run_context.session_state = {}

    action = arguments.get("action", "retrieve")
    cust_id = arguments.get("customer_id")
    name = arguments.get("name")

    if not cust_id:
        raise ValueError("customer_id is required.")

    if action == "create":
        run_context.session_state["customer_profiles"][cust_id] = {"name": name}
        return f"Success! Customer {cust_id} has been created."

    if action == "retrieve":
        profile = run_context.session_state.get("customer_profiles", {}).get(cust_id)
        if profile:
            return f"Profile for {cust_id}: {json.dumps(profile)}"
        else:
            raise ValueError(f"Customer '{cust_id}' not found.")
    return None


def test_seed_000_toolkit_registers_its_method() -> None:
    kit = CustomerDBTools()
    assert kit.name == "CustomerDBTools"
    [fn] = kit.functions
    assert fn.name == "process_customer_request"
    assert fn.injected == frozenset({"agent"})
    assert fn.parameters["properties"] == {
        "customer_id": {"type": "string"},
        "action": {"type": "string", "default": "retrieve"},
        "name": {"type": "string", "default": "John Doe"},
    }
    assert fn.parameters["required"] == ["customer_id"]


async def test_seed_000_hook_handles_the_call_and_edits_state() -> None:
    [fn] = normalize_tools([CustomerDBTools()])
    context = RunContext({"customer_profiles": {"123": {"name": "Jane Doe"}}})
    injected = {"run_context": context, "agent": object()}
    hooks = [customer_management_hook]

    created = await call_with_hooks(
        fn, {"customer_id": "789", "action": "create", "name": "Tom"}, hooks, injected
    )
    assert created == "Success! Customer 789 has been created."
    assert context.session_state == {
        "customer_profiles": {"123": {"name": "Jane Doe"}, "789": {"name": "Tom"}}
    }
    retrieved = await call_with_hooks(fn, {"customer_id": "789"}, hooks, injected)
    assert retrieved == 'Profile for 789: {"name": "Tom"}'
    with pytest.raises(ValueError, match="Customer '999' not found"):
        await call_with_hooks(fn, {"customer_id": "999"}, hooks, injected)
    with pytest.raises(ValueError, match="customer_id is required"):
        await call_with_hooks(fn, {}, hooks, injected)
    assert await call_with_hooks(fn, {"customer_id": "1", "action": "x"}, hooks, injected) is None


# -- Toolkit ------------------------------------------------------------------------------


def ping() -> str:
    """Answer pong."""
    return "pong"


def test_toolkit_with_name_and_tools() -> None:
    kit = Toolkit(name="misc", tools=[ping])
    assert kit.name == "misc"
    assert [f.name for f in kit.functions] == ["ping"]
    assert repr(kit) == "Toolkit(name='misc', tools=['ping'])"


def test_register_renames_and_rejects_duplicates() -> None:
    kit = Toolkit("kit", [ping])
    kit.register(ping, name="ping2")
    with pytest.raises(ConfigurationError, match="toolkit 'kit' already has a tool named 'ping'"):
        kit.register(ping)


def test_unknown_keyword_arguments_are_an_error() -> None:
    with pytest.raises(TypeError):
        Toolkit(nmae="typo")  # type: ignore[call-arg]


# -- normalize_tools ----------------------------------------------------------------------


def test_normalize_flattens_in_order() -> None:
    @tool(name="decorated")
    def dec() -> None: ...

    functions = normalize_tools([ping, CustomerDBTools(), dec])
    assert [f.name for f in functions] == ["ping", "process_customer_request", "decorated"]
    assert all(isinstance(f, Function) for f in functions)
    assert functions[2] is dec


def test_duplicate_names_name_both_places() -> None:
    kit = Toolkit("kit", [ping])
    with pytest.raises(ConfigurationError) as info:
        normalize_tools([customer_management_hook, kit, ping])
    assert str(info.value).startswith(
        "duplicate tool name 'ping': tools[1] (toolkit 'kit') and tools[2]"
    )


def test_non_callable_names_position_and_type() -> None:
    with pytest.raises(ConfigurationError, match=r"tools\[1\] is not callable: got str"):
        normalize_tools([ping, "search"])  # type: ignore[list-item]


def test_toolkit_class_instead_of_instance() -> None:
    with pytest.raises(ConfigurationError, match=r"pass an instance: CustomerDBTools\(\)"):
        normalize_tools([CustomerDBTools])


def test_a_single_tool_instead_of_a_list() -> None:
    with pytest.raises(ConfigurationError, match="tools must be a list, got a single function"):
        normalize_tools(ping)  # type: ignore[arg-type]
