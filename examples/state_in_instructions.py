"""State in instructions, switching sessions on run, and overwriting the stored
state. The offline model answers from the rendered system message, as an LLM would.

Run: python examples/state_in_instructions.py
"""

from __future__ import annotations

import re
from typing import Any

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo


def answer_from_instructions(messages: list[Message], info: RequestInfo) -> ModelResponse:
    system = messages[0].content if messages[0].role == "system" else ""
    question = (messages[-1].content or "").lower()
    if "name" in question and (m := re.search(r"name is (\w+)", system or "")):
        return ModelResponse(content=f"Your name is {m.group(1)}.")
    if "old" in question and (m := re.search(r"age is (\d+)", system or "")):
        return ModelResponse(content=f"You are {m.group(1)} years old.")
    if "session_state" in question and (
        m := re.search(r"<session_state>\n(.*)\n</session_state>", system or "", re.S)
    ):
        return ModelResponse(content=f"My session_state is {m.group(1)}")
    return ModelResponse(content="I don't know.")


def state_in_instructions(db_file: str) -> str:
    agent = Agent(
        db=SqliteDb(db_file=db_file),
        model=FunctionModel(answer_from_instructions),
        # Initialize the session state with a variable
        session_state={"user_name": "John"},
        # You can use variables from the session state in the instructions
        instructions="Users name is {user_name}",
        markdown=True,
    )
    return str(agent.print_response("What is my name?", stream=True).content)


def name_and_age_agent(db_file: str) -> Agent:
    return Agent(
        db=SqliteDb(db_file=db_file),
        model=FunctionModel(answer_from_instructions),
        instructions="Users name is {user_name} and age is {age}",
    )


# `statewise run examples/state_in_instructions.py "What is my name?" --state
# '{"user_name": "Ann", "age": 41}'` runs this agent (sessions in tmp/instructions.db).
agent = name_and_age_agent("tmp/instructions.db")


def changing_state_on_run(db_file: str) -> list[str]:
    agent = name_and_age_agent(db_file)
    answers = []
    # Sets the session state for the session with the id "user_1_session_1"
    answers.append(
        agent.print_response(
            "What is my name?",
            session_id="user_1_session_1",
            user_id="user_1",
            session_state={"user_name": "John", "age": 30},
        ).content
    )
    # Will load the session state from the session with the id "user_1_session_1"
    answers.append(
        agent.print_response(
            "How old am I?", session_id="user_1_session_1", user_id="user_1"
        ).content
    )
    # Sets the session state for the session with the id "user_2_session_1"
    answers.append(
        agent.print_response(
            "What is my name?",
            session_id="user_2_session_1",
            user_id="user_2",
            session_state={"user_name": "Jane", "age": 25},
        ).content
    )
    # Will load the session state from the session with the id "user_2_session_1"
    answers.append(
        agent.print_response(
            "How old am I?", session_id="user_2_session_1", user_id="user_2"
        ).content
    )
    return [str(a) for a in answers]


def overwriting_session_state(db_file: str) -> list[dict[str, Any]]:
    agent = Agent(
        model=FunctionModel(answer_from_instructions),
        db=SqliteDb(db_file=db_file),
        markdown=True,
        session_state={},
        add_session_state_to_context=True,
        overwrite_db_session_state=True,
    )
    stored = []
    agent.print_response(
        "Can you tell me what's in your session_state?",
        session_state={"shopping_list": ["Potatoes"]},
        stream=True,
    )
    print(f"Stored session state: {agent.get_session_state()}")
    stored.append(agent.get_session_state())
    agent.print_response(
        "Can you tell me what is in your session_state?",
        session_state={"secret_number": 43},
        stream=True,
    )
    print(f"Stored session state: {agent.get_session_state()}")
    stored.append(agent.get_session_state())
    return stored


def main(db_dir: str = "tmp") -> dict[str, Any]:
    return {
        "name": state_in_instructions(f"{db_dir}/agents.db"),
        "answers": changing_state_on_run(f"{db_dir}/agents.db"),
        "overwrite": overwriting_session_state(f"{db_dir}/agents.db"),
    }


if __name__ == "__main__":
    main()
