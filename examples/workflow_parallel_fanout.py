"""A Parallel fan-out that counts words of three documents into one session state.

Each branch works on its own view of the state; when all are done, their changes merge in
declaration order: increments add up, appends keep every item, and a key that every branch
sets (`longest`) is decided by its rule (`max`), recorded as a conflict. The result is the
same whichever branch finishes first.

Run: python examples/workflow_parallel_fanout.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from statewise import Parallel, RunContext, StepInput, Workflow
from statewise.db import SqliteDb

DOCUMENTS = {
    "intro": "state is never lost",
    "middle": "state is never stale and never lost",
    "outro": "always explainable",
}


def counter(name: str, delay: float) -> Any:
    async def count_words(step_input: StepInput, run_context: RunContext) -> int:
        await asyncio.sleep(delay)  # finish in a different order than declared
        state = run_context.session_state
        words = DOCUMENTS[name].split()
        for word in words:
            state["word_counts"].increment(word)
        state.increment("total_words", len(words))
        state["processed"].append(name)
        state["longest"] = len(words)
        return len(words)

    count_words.__name__ = f"count_{name}"
    return count_words


def report(step_input: StepInput, run_context: RunContext) -> str:
    state = run_context.session_state
    top = sorted(state["word_counts"].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return f"{state['total_words']} words; top: {top}"


def build(db_file: str) -> Workflow:
    return Workflow(
        name="Word Count Fan-out",
        db=SqliteDb(db_file=db_file),
        session_state={"word_counts": {}, "total_words": 0, "processed": [], "longest": 0},
        state_rules={"longest": "max"},
        steps=[
            Parallel(
                counter("intro", 0.03),
                counter("middle", 0.0),
                counter("outro", 0.01),
                name="count",
            ),
            report,
        ],
    )


# `statewise run examples/workflow_parallel_fanout.py "count the documents"` runs this workflow (sessions in tmp/fanout.db).
workflow = build("tmp/fanout.db")


def main(db_dir: str = "tmp") -> dict[str, Any]:
    workflow = build(f"{db_dir}/fanout.db")
    output = workflow.print_response(input="count the documents", session_id="fanout")
    state = workflow.get_session_state("fanout")
    print("Final state:", state)
    print("Conflicts:", output.conflicts)
    return {"state": state, "output": output}


if __name__ == "__main__":
    main()
