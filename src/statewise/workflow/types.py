"""What a workflow step receives (`StepInput`) and returns (`StepOutput`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statewise.exceptions import StateSerializationError
from statewise.state.jsonvalue import to_json_value


@dataclass(kw_only=True, eq=False)
class StepOutput:
    """A step's result. `stop=True` ends the workflow after this step.

    `content` is what the next step sees as `previous_step_content`; it is persisted with
    the step's commit (as JSON, or as text when it is not JSON).
    """

    content: Any = None
    stop: bool = False
    step_name: str | None = None
    skipped: bool = False
    steps: list[StepOutput] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "step_name": self.step_name,
            "content": json_or_text(self.content),
            "stop": self.stop,
            "skipped": self.skipped,
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepOutput:
        return cls(
            step_name=data.get("step_name"),
            content=data.get("content"),
            stop=bool(data.get("stop", False)),
            skipped=bool(data.get("skipped", False)),
            steps=[cls.from_json(s) for s in data.get("steps", [])],
        )

    def walk(self) -> list[StepOutput]:
        """This output and every nested one, depth first, in execution order."""
        out: list[StepOutput] = []
        for child in self.steps:
            out.extend(child.walk())
        out.append(self)
        return out


def json_or_text(value: Any) -> Any:
    """`value` as JSON for the event log, or its text when it is not JSON: a step's
    content may be any object, and recording it must not fail the run."""
    try:
        return to_json_value(value, ("content",))
    except StateSerializationError:
        return str(value)


@dataclass(kw_only=True, eq=False)
class StepInput:
    """What a step sees: the workflow's input, the previous step's content, and the output
    of every step that ran before it in this run, by name."""

    input: Any
    previous_step_content: Any = None
    previous_step_outputs: dict[str, StepOutput] = field(default_factory=dict)

    def get_step_output(self, name: str) -> StepOutput | None:
        return self.previous_step_outputs.get(name)

    def get_step_content(self, name: str) -> Any:
        """The content of the earlier step called `name` (None if it has not run)."""
        output = self.previous_step_outputs.get(name)
        return output.content if output is not None else None

    def get_all_previous_content(self) -> str:
        return "\n\n".join(
            f"{name}: {out.content}"
            for name, out in self.previous_step_outputs.items()
            if out.content is not None
        )
