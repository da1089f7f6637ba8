"""The lifecycle of session state written by callbacks, checked as it happens.

Each callback writes one key through `callback_context.state`, then asserts three things:
which keys it can already see (every write is visible at once), which are already in the
database, and which are not yet. "In the database" is read through a second, independent
SQLite connection, so the checks see only what was committed. statewise commits at three
points (DESIGN §3, docs/callbacks.md):

  run start    the input and `before_agent` writes
  end of step  the model response and the `before_model` / `after_model` writes
  run end      the answer and `after_agent` writes

Run it offline (the model is a FunctionModel that always gives the same answer):

    statewise run examples/session_state_agent --replay examples/session_state_agent/input.json
"""

from __future__ import annotations

from typing import Any

from statewise import Agent, RunContext
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, RequestInfo

BEFORE_AGENT = "before_agent_callback_state_key"
BEFORE_MODEL = "before_model_callback_state_key"
AFTER_MODEL = "after_model_callback_state_key"
AFTER_AGENT = "after_agent_callback_state_key"

ANSWER = "Hello! How can I help you verify something today?"


def persisted_state(callback_context: RunContext) -> dict[str, Any]:
    """The session's state as committed, read through a second, independent connection."""
    db = callback_context.agent.db
    if not isinstance(db, SqliteDb) or db.db_file == ":memory:":
        raise RuntimeError(
            "this sample reads the database through a second connection, so it needs a SQLite "
            "file: pass --db sqlite:///path/to/file.db"
        )
    with SqliteDb(db_file=db.db_file) as independent:
        return Agent(db=independent).get_session_state(callback_context.session_id)


def assert_session_values(
    callback_name: str,
    callback_context: RunContext,
    *,
    keys_in_ctx_session: list[str],
    keys_in_db_session: list[str],
    keys_not_in_db_session: list[str],
) -> None:
    print(f"===================== In {callback_name} ==============================")
    stored = persisted_state(callback_context)
    for key in keys_in_ctx_session:
        assert key in callback_context.state, f"{key} should be visible in the context"
    print(f"** Asserting keys are cached in context: {keys_in_ctx_session} pass ✅")
    for key in keys_in_db_session:
        assert key in stored, f"{key} should already be persisted"
    print(f"** Asserting keys are already persisted in session: {keys_in_db_session} pass ✅")
    for key in keys_not_in_db_session:
        assert key not in stored, f"{key} should not be persisted yet"
    print(f"** Asserting keys are not persisted in session yet: {keys_not_in_db_session} pass ✅")
    print("============================================================")


def before_agent_callback(callback_context: RunContext) -> None:
    callback_context.state[BEFORE_AGENT] = True
    assert_session_values(
        "before_agent_callback",
        callback_context,
        keys_in_ctx_session=[BEFORE_AGENT],
        keys_in_db_session=[],
        keys_not_in_db_session=[BEFORE_AGENT],
    )


def before_model_callback(callback_context: RunContext) -> None:
    callback_context.state[BEFORE_MODEL] = True
    assert_session_values(
        "before_model_callback",
        callback_context,
        keys_in_ctx_session=[BEFORE_AGENT, BEFORE_MODEL],
        keys_in_db_session=[BEFORE_AGENT],
        keys_not_in_db_session=[BEFORE_MODEL],
    )


def after_model_callback(callback_context: RunContext) -> None:
    callback_context.state[AFTER_MODEL] = True
    assert_session_values(
        "after_model_callback",
        callback_context,
        keys_in_ctx_session=[BEFORE_AGENT, BEFORE_MODEL, AFTER_MODEL],
        keys_in_db_session=[BEFORE_AGENT],
        keys_not_in_db_session=[BEFORE_MODEL, AFTER_MODEL],
    )


def after_agent_callback(callback_context: RunContext) -> None:
    callback_context.state[AFTER_AGENT] = True
    assert_session_values(
        "after_agent_callback",
        callback_context,
        keys_in_ctx_session=[BEFORE_AGENT, BEFORE_MODEL, AFTER_MODEL, AFTER_AGENT],
        keys_in_db_session=[BEFORE_AGENT, BEFORE_MODEL, AFTER_MODEL],
        keys_not_in_db_session=[AFTER_AGENT],
    )


def answer(messages: list[Message], info: RequestInfo) -> str:
    return ANSWER


root_agent = Agent(
    model=FunctionModel(answer),
    name="root_agent",
    description="A sample agent that checks when callback state writes are persisted.",
    instructions="Greet the user and offer to help.",
    db=SqliteDb(db_file="tmp/session_state_agent.db"),
    before_agent_callback=before_agent_callback,
    before_model_callback=before_model_callback,
    after_model_callback=after_model_callback,
    after_agent_callback=after_agent_callback,
)
