"""A fleet app whose run ends in a `strict` conflict on a secret key: its tool reads the
token, another writer stores a different one meanwhile, then the tool stores its own.
Sessions in schema `vault` of STATEWISE_FLEET_TEST_DB; the secrets come from
STATEWISE_FLEET_TEST_SECRETS (a JSON object: token, theirs, ours)."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from statewise import Agent
from statewise.db.postgres import PostgresDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

SECRETS = json.loads(os.environ.get("STATEWISE_FLEET_TEST_SECRETS", "{}"))


def build(url: str) -> tuple[Agent, Agent]:
    db = PostgresDb(url, schema="vault", pool_size=4)
    holder: dict[str, Agent] = {}

    def racer(session_state: dict[str, Any], run_context: Any) -> str:
        """Store a token while another writer stores one too."""
        _ = session_state["api_token"]
        sid = run_context.session_id
        other = threading.Thread(
            target=lambda: holder["b"].state.for_session(sid).set("api_token", SECRETS["theirs"])
        )
        other.start()
        other.join()
        session_state["api_token"] = SECRETS["ours"]
        return "raced"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("racer", {}, "c1")])

    common: dict[str, Any] = dict(
        db=db,
        model=FunctionModel(model),
        tools=[racer],
        secret_keys=["api_token"],
        state_rules={"api_token": "strict"},
    )
    vault = Agent(name="vault", **common)
    holder["b"] = Agent(name="vault_b", app_name="vault", **common)
    return vault, holder["b"]


if "STATEWISE_FLEET_TEST_DB" in os.environ:  # in a worker process
    vault, vault_b = build(os.environ["STATEWISE_FLEET_TEST_DB"])
