"""Dynamic session state through a tool hook, templated into instructions.

A Toolkit registers `process_customer_request`; a tool hook handles every call itself and
edits `run_context.session_state`. The instructions show `{customer_profiles}`.

Some frameworks render instructions once per run, so the second model call would not see
customer '789' created by the first. In statewise it does: instructions are re-rendered from state before
every model call. `main()` returns the system prompts the model saw, so this is checked.

Run: python examples/dynamic_session_state.py
"""

from __future__ import annotations

import json
from typing import Any

from statewise import Agent, RunContext, Toolkit
from statewise.db import InMemoryDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


class CustomerDBTools(Toolkit):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register(self.process_customer_request)

    def process_customer_request(
        self,
        agent: Agent,
        customer_id: str,
        action: str = "retrieve",
        name: str = "John Doe",
    ) -> str:
        """Create or retrieve a customer profile.

        Args:
            customer_id: The customer's id.
            action: "create" or "retrieve".
            name: The customer's name (for create).
        """
        return "This should not be seen: the hook answers every call."


def customer_management_hook(run_context: RunContext, arguments: dict[str, Any]) -> str | None:
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
        raise ValueError(f"Customer '{cust_id}' not found.")
    return None


class StepByStepModel:
    """Plays the model: create 789, then retrieve it, then answer. Records system prompts."""

    def __init__(self) -> None:
        self.system_prompts: list[str] = []

    def __call__(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        self.system_prompts.append(messages[0].content or "")
        calls_so_far = sum(len(m.tool_calls) for m in messages if m.role == "assistant")
        if calls_so_far == 0:
            return ModelResponse(
                tool_calls=[
                    ToolCall(
                        "process_customer_request",
                        {"customer_id": "789", "action": "create", "name": "Tom"},
                        "call_1",
                    )
                ]
            )
        if calls_so_far == 1:
            return ModelResponse(
                tool_calls=[
                    ToolCall(
                        "process_customer_request",
                        {"customer_id": "789", "action": "retrieve"},
                        "call_2",
                    )
                ]
            )
        return ModelResponse(content=f"Done: {messages[-1].content}")


def build(player: StepByStepModel) -> Agent:
    return Agent(
        model=FunctionModel(player),
        tools=[CustomerDBTools()],
        tool_hooks=[customer_management_hook],
        session_state={"customer_profiles": {"123": {"name": "Jane Doe"}}},
        instructions=(
            "Your profiles: {customer_profiles}. Use `process_customer_request`. "
            "Use either create or retrieve as action for the tool."
        ),
        resolve_in_context=True,
        db=InMemoryDb(),
    )


# `statewise run examples/dynamic_session_state.py "Create customer 789 named Tom"` runs
# this agent (in memory: pass --db sqlite:///tmp/customers.db to keep the session).
agent = build(StepByStepModel())


def main() -> dict[str, Any]:
    player = StepByStepModel()
    agent = build(player)
    prompt = "First, create customer 789 named 'Tom'. Then, retrieve Tom's profile. Step by step."
    output = agent.print_response(prompt, stream=False)
    print("System prompt of the second model call:", player.system_prompts[1])
    return {
        "agent": agent,
        "output": output,
        "system_prompts": player.system_prompts,
        "state": agent.get_session_state(),
    }


if __name__ == "__main__":
    result = main()
    assert "789" in result["system_prompts"][1], "the second call must see customer 789"
    print("The second model call saw customer 789 in its system prompt.")
