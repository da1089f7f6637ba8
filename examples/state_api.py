"""The state API (`agent.state.get/set/has/delete/update/clear/get_all`), state
persisted per session_id, complex nested state, tools that take `agent_state`, a stateful
chat wrapper with lifecycle management, and validation/backup/restore.

Run: python examples/state_api.py
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from statewise import Agent, tool
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, TestModel, ToolCall


def echo_state_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    return ModelResponse(
        content=f"(system prompt was: {messages[0].content if messages[0].role == 'system' else ''})"
    )


def basic_state_usage() -> dict[str, Any]:
    agent = Agent(model=FunctionModel(echo_state_model), add_session_state_to_context=True)
    agent.state.set("user_name", "Alice")
    agent.state.set("preferences", {"theme": "dark", "language": "en"})
    user_name = agent.state.get("user_name", "Unknown User")
    preferences = agent.state.get("preferences", {})
    assert agent.state.has("user_name")
    response = agent.run("What's my name?")  # the state is in the context sent to the model
    return {"user_name": user_name, "preferences": preferences, "response": response.content}


def persistence_with_storage(db_file: str) -> list[dict[str, Any]]:
    seen = []
    for _process_start in range(2):
        # A new agent object each time, as after a restart: the state comes from the db.
        agent = Agent(
            model=FunctionModel(echo_state_model),
            session_id="user_123_session",
            db=SqliteDb(db_file=db_file),
        )
        existing_value = agent.state.get("user_name")
        print("Welcome back" if existing_value else "Welcome, new user!", existing_value or "")
        agent.state.set("user_name", "Alice")
        agent.state.set("last_interaction", "2023-10-15")
        agent.state.set("session_count", agent.state.get("session_count", 0) + 1)
        agent.run("Hello")
        seen.append(agent.state.get_all())
    return seen


def complex_state() -> dict[str, Any]:
    agent = Agent(model=FunctionModel(echo_state_model))
    agent.state.set(
        "user",
        {
            "name": "Alice",
            "email": "alice@example.com",
            "preferences": {"theme": "dark", "notifications": True, "language": "en"},
            "history": [
                {"date": "2023-10-12", "action": "login"},
                {"date": "2023-10-13", "action": "update_profile"},
            ],
            "metadata": {
                "created_at": datetime.now().isoformat(),
                "last_updated": datetime.now().isoformat(),
            },
        },
    )
    user = agent.state.get("user", {})
    if "preferences" in user:
        user["preferences"]["notifications"] = False
        user["metadata"]["last_updated"] = datetime.now().isoformat()
        agent.state.set("user", user)
    agent.state.update(
        "user",
        {
            "last_login": datetime.now().isoformat(),
            "login_count": agent.state.get("user", {}).get("login_count", 0) + 1,
        },
    )
    return agent.state.get("user")


@tool
def counter_tool(agent_state: Any) -> str:
    """Increment a counter in the agent state and return current value."""
    count = agent_state.get("counter", 0)
    count += 1
    agent_state.set("counter", count)
    agent_state.set("last_counter_update", datetime.now().isoformat())
    return f"Counter incremented to: {count}"


@tool
def user_preference_tool(agent_state: Any, preference: str, value: str) -> str:
    """Update user preferences in state.

    Args:
        preference: Which preference to set.
        value: Its new value.
    """
    user_data = agent_state.get("user", {})
    if "preferences" not in user_data:
        user_data["preferences"] = {}
    user_data["preferences"][preference] = value
    user_data["last_updated"] = datetime.now().isoformat()
    agent_state.set("user", user_data)
    return f"Updated {preference} to {value}"


def preference_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content=messages[-1].content)
    text = messages[-1].content or ""
    if "counter" in text.lower():
        return ModelResponse(tool_calls=[ToolCall("counter_tool", {}, "c1")])
    return ModelResponse(
        tool_calls=[
            ToolCall("user_preference_tool", {"preference": "theme", "value": "dark"}, "p1")
        ]
    )


def preferences_agent(db: str | None = None) -> Agent:
    return Agent(
        model=FunctionModel(preference_model), tools=[counter_tool, user_preference_tool], db=db
    )


# `statewise run examples/state_api.py "Increment the counter"` runs this agent, whose tools
# take `agent_state` (sessions in tmp/state_api.db).
agent = preferences_agent("sqlite:///tmp/state_api.db")


def state_aware_tools() -> dict[str, Any]:
    agent = preferences_agent()
    agent.run("Increment the counter")
    agent.run("Set my theme preference to dark")
    return agent.get_session_state()


class StatefulChatAgent:
    def __init__(self, user_id: str, db_file: str):
        self.user_id = user_id
        self.agent = Agent(
            model=TestModel(),
            session_id=f"user_{user_id}_session",
            db=SqliteDb(db_file=db_file),
        )
        self._initialize_state()

    def _initialize_state(self) -> None:
        if not self.agent.state.has("initialized"):
            self.agent.state.set("user_id", self.user_id)
            self.agent.state.set("created_at", datetime.now().isoformat())
            self.agent.state.set("conversation_count", 0)
            self.agent.state.set(
                "preferences", {"language": "en", "timezone": "UTC", "response_style": "friendly"}
            )
            self.agent.state.set("initialized", True)
        self.agent.state.set("last_session", datetime.now().isoformat())
        session_count = self.agent.state.get("session_count", 0)
        self.agent.state.set("session_count", session_count + 1)

    def chat(self, message: str) -> str:
        conv_count = self.agent.state.get("conversation_count", 0)
        self.agent.state.set("conversation_count", conv_count + 1)
        last_messages = self.agent.state.get("recent_messages", [])
        last_messages.append(
            {
                "timestamp": datetime.now().isoformat(),
                "user_message": message[:100],
                "message_id": conv_count + 1,
            }
        )
        if len(last_messages) > 10:
            last_messages = last_messages[-10:]
        self.agent.state.set("recent_messages", last_messages)
        return str(self.agent.run(message).content)

    def cleanup_old_state(self, days: int = 30) -> None:
        cutoff_date = datetime.now() - timedelta(days=days)
        recent_messages = self.agent.state.get("recent_messages", [])
        filtered = [
            m for m in recent_messages if datetime.fromisoformat(m["timestamp"]) > cutoff_date
        ]
        self.agent.state.set("recent_messages", filtered)

    def export_state(self) -> dict[str, Any]:
        return self.agent.state.get_all()


class SafeStateAgent:
    """Validation, backup and restore around the state API."""

    def __init__(self) -> None:
        self.agent = Agent(model=TestModel())

    def safe_set_state(self, key: str, value: Any) -> bool:
        try:
            self.agent.state.set(key, value)  # statewise refuses non-JSON values itself
            return True
        except Exception as e:
            print(f"Failed to set state for key '{key}': {e}")
            return False

    def backup_state(self) -> dict[str, Any]:
        return self.agent.state.get_all()

    def restore_state(self, backup: dict[str, Any]) -> bool:
        self.agent.state.clear()
        return all(self.safe_set_state(k, v) for k, v in backup.items())


def main(db_dir: str = "tmp") -> dict[str, Any]:
    chat = StatefulChatAgent("42", f"{db_dir}/chat.db")
    for i in range(12):
        chat.chat(f"message {i}")
    chat.cleanup_old_state()
    safe = SafeStateAgent()
    safe.safe_set_state("user", {"name": "Ann", "preferences": {}})
    rejected = safe.safe_set_state("callback", lambda x: x)  # not JSON: refused, nothing stored
    backup = safe.backup_state()
    safe.agent.state.set("user", {"name": "changed"})
    safe.restore_state(backup)
    result = {
        "basic": basic_state_usage(),
        "persistence": persistence_with_storage(f"{db_dir}/data.db"),
        "complex": complex_state(),
        "tools": state_aware_tools(),
        "chat": chat.export_state(),
        "safe_rejected": rejected,
        "safe_after_restore": safe.agent.state.get_all(),
    }
    print(
        json.dumps({k: v for k, v in result.items() if k != "basic"}, indent=2, default=str)[:2000]
    )
    return result


if __name__ == "__main__":
    main()
