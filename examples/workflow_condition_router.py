"""A support-triage workflow whose Condition and Router read the session state.

1. `classify` (a function) files the ticket in state with its category.
2. `Condition` "vip_escalation": runs the escalation step only for VIP customers (the
   evaluator reads `run_context.session_state`).
3. `Router` "route_by_category": the selector reads the ticket's category from state and
   picks the billing agent or the tech agent by step name; the chosen agent's tool writes
   its resolution into the same state.

Offline models play the two agents. Run: python examples/workflow_condition_router.py
"""

from __future__ import annotations

from typing import Any

from statewise import Agent, Condition, Router, RunContext, Step, StepInput, Workflow
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def classify(step_input: StepInput, run_context: RunContext) -> str:
    """File the ticket: billing if it mentions money, tech otherwise."""
    text = str(step_input.input)
    customer, _, body = text.partition(": ")
    billing = any(word in body.lower() for word in ("refund", "invoice", "charge"))
    category = "billing" if billing else "tech"
    state = run_context.session_state
    state["tickets"].append({"customer": customer, "text": body, "category": category})
    state["current"] = len(state["tickets"]) - 1
    return category


def is_vip(step_input: StepInput, run_context: RunContext) -> bool:
    state = run_context.session_state
    return state["tickets"][state["current"]]["customer"] in state["vip_customers"]


def escalate(step_input: StepInput, run_context: RunContext) -> str:
    state = run_context.session_state
    state.increment("escalations")
    state["tickets"][state["current"]]["priority"] = "high"
    return "escalated"


def route_by_category(step_input: StepInput, run_context: RunContext) -> str:
    state = run_context.session_state
    return f"{state['tickets'][state['current']]['category']}_desk"


def resolve_ticket(run_context: RunContext, resolution: str) -> str:
    """Record how the current ticket was resolved.

    Args:
        resolution: What was done.
    """
    state = run_context.session_state
    state["tickets"][state["current"]]["resolution"] = resolution
    return "recorded"


def desk_model(action: str) -> FunctionModel:
    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content=f"{action.capitalize()} done.")
        return ModelResponse(tool_calls=[ToolCall("resolve_ticket", {"resolution": action}, "c1")])

    return FunctionModel(fn, id=f"{action}-player")


def build(db_file: str) -> Workflow:
    billing = Agent(name="billing", model=desk_model("refund issued"), tools=[resolve_ticket])
    tech = Agent(name="tech", model=desk_model("bug filed"), tools=[resolve_ticket])
    return Workflow(
        name="Support Triage",
        db=SqliteDb(db_file=db_file),
        session_state={"tickets": [], "vip_customers": ["ada"], "escalations": 0},
        steps=[
            classify,
            Condition("vip_escalation", evaluator=is_vip, steps=[escalate]),
            Router(
                "route_by_category",
                selector=route_by_category,
                choices=[
                    Step(name="billing_desk", agent=billing),
                    Step(name="tech_desk", agent=tech),
                ],
            ),
        ],
    )


# `statewise run examples/workflow_condition_router.py "ada: please refund my charge"` runs this workflow (sessions in tmp/triage.db).
workflow = build("tmp/triage.db")


def main(db_dir: str = "tmp") -> dict[str, Any]:
    workflow = build(f"{db_dir}/triage.db")
    answers = []
    for ticket in [
        "ada: I was charged twice, please refund",
        "bob: the app crashes on start",
        "cy: where is my invoice?",
    ]:
        output = workflow.print_response(input=ticket, session_id="support")
        answers.append(output.content)
    state = workflow.get_session_state("support")
    print("Final state:", state)
    return {"state": state, "answers": answers}


if __name__ == "__main__":
    main()
