"""Session summaries: made by the model after each completed run, stored as versioned
session data that names the runs it covers, shown in the prompt, never a run's failure."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, SessionSummary, SessionSummaryManager, Team
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def _is_summary_request(messages: list[Message]) -> bool:
    return messages[0].role == "system" and "running summary" in (messages[0].content or "")


class Script:
    """A model that answers runs with "answer N" and summary requests with JSON naming
    the turns it was shown; it records every request."""

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []
        self.answers = 0

    def __call__(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        self.requests.append(messages)
        if _is_summary_request(messages):
            text = messages[-1].content or ""
            turns = [line for line in text.splitlines() if line.startswith("user: ")]
            shown = ", ".join(line.removeprefix("user: ") for line in turns)
            return ModelResponse(
                content=json.dumps({"summary": f"talked about {shown}", "topics": ["fruit"]})
            )
        self.answers += 1
        return ModelResponse(content=f"answer {self.answers}")

    def summary_requests(self) -> list[str]:
        return [m[-1].content or "" for m in self.requests if _is_summary_request(m)]

    def run_prompts(self) -> list[str]:
        return [
            m[0].content or ""
            for m in self.requests
            if not _is_summary_request(m) and m[0].role == "system"
        ]


def _agent(tmp_path: Path, script: Script, **options: Any) -> Agent:
    return Agent(
        name="chat",
        model=FunctionModel(script),
        db=SqliteDb(db_file=str(tmp_path / "s.db")),
        enable_session_summaries=True,
        **options,
    )


def test_a_summary_covers_the_runs_so_far_and_folds_in_the_new_ones(tmp_path: Path) -> None:
    script = Script()
    agent = _agent(tmp_path, script)
    ids = [agent.run(text, session_id="s1").run_id for text in ("apples", "pears", "plums")]

    summary = agent.get_session_summary("s1")
    assert isinstance(summary, SessionSummary)
    assert summary.runs == 3
    assert (summary.first_run_id, summary.last_run_id) == (ids[0], ids[2])
    assert summary.topics == ["fruit"]
    assert summary.summary == "talked about plums"
    # Each update reads only the runs since the last summary, plus that summary.
    requests = script.summary_requests()
    assert len(requests) == 3
    assert "user: apples" in requests[0] and "Summary so far" not in requests[0]
    assert "talked about pears" in requests[2] and "user: plums" in requests[2]
    assert "user: apples" not in requests[2] and "user: pears" not in requests[2]
    # Bookkeeping, not user state: hidden from reads, one event per summary.
    assert agent.get_session_state("s1") == {}
    events = [e for e in agent.db.read_events("s1") if e.type == "session_summary"]
    assert [e.data["last_run_id"] for e in events] == ids
    assert [e.data["runs"] for e in events] == [1, 2, 3]


def test_the_prompt_shows_the_summary(tmp_path: Path) -> None:
    script = Script()
    agent = _agent(tmp_path, script)
    agent.run("apples", session_id="s1")
    agent.run("pears", session_id="s1")
    prompts = script.run_prompts()
    assert len(prompts) == 1  # the first run had no summary and nothing else to show
    assert "Summary of this conversation so far (1 earlier run):" in prompts[0]
    assert "talked about apples" in prompts[0] and "Topics: fruit" in prompts[0]


def test_summaries_made_but_kept_out_of_the_prompt(tmp_path: Path) -> None:
    script = Script()
    agent = _agent(tmp_path, script, add_session_summary_to_context=False)
    agent.run("apples", session_id="s1")
    agent.run("pears", session_id="s1")
    assert script.run_prompts() == []
    assert agent.get_session_summary("s1") is not None


def test_a_summary_made_elsewhere_is_shown_without_making_new_ones(tmp_path: Path) -> None:
    script = Script()
    _agent(tmp_path, script).run("apples", session_id="s1")
    reader_script = Script()
    reader = Agent(
        model=FunctionModel(reader_script),
        db=SqliteDb(db_file=str(tmp_path / "s.db")),
        add_session_summary_to_context=True,
    )
    reader.run("pears", session_id="s1")
    assert "talked about apples" in reader_script.run_prompts()[0]
    assert reader_script.summary_requests() == []
    assert reader.get_session_summary("s1").runs == 1  # type: ignore[union-attr]


def test_a_manager_with_its_own_model_and_plain_text_answers(tmp_path: Path) -> None:
    script = Script()
    cheap = FunctionModel(lambda messages, info: "  The user likes apples.  ")
    agent = _agent(tmp_path, script, session_summary_manager=SessionSummaryManager(model=cheap))
    agent.run("apples", session_id="s1")
    summary = agent.get_session_summary("s1")
    assert summary is not None
    assert (summary.summary, summary.topics) == ("The user likes apples.", [])
    assert script.summary_requests() == []  # the agent's own model was not asked


def test_a_failing_summary_never_fails_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(messages: list[Message], info: RequestInfo) -> ModelResponse:
        raise RuntimeError("summarizer is down")

    agent = _agent(
        tmp_path, Script(), session_summary_manager=SessionSummaryManager(FunctionModel(broken))
    )
    with caplog.at_level(logging.WARNING, logger="statewise.summaries"):
        output = agent.run("apples", session_id="s1")
    assert output.status == "completed" and output.content == "answer 1"
    assert agent.get_session_summary("s1") is None
    assert "summarizer is down" in caplog.text
    assert [e.type for e in agent.db.read_events("s1")].count("session_summary") == 0


def test_the_summary_is_versioned_with_the_state(tmp_path: Path) -> None:
    agent = _agent(tmp_path, Script())
    agent.run("apples", session_id="s1")
    agent.run("pears", session_id="s1")
    history = agent.get_state_history("s1")
    made = [h["version"] for h in history if h["sources"] == ["session_summary"]]
    assert len(made) == 2
    first_summary = made[0]
    agent.rollback_state("s1", to=first_summary)
    assert agent.get_session_summary("s1").runs == 1  # type: ignore[union-attr]
    fork = agent.fork_session("s1", new_session_id="s2")
    assert agent.get_session_summary(fork).summary == "talked about apples"  # type: ignore[union-attr]


def test_summaries_read_stored_runs_so_secrets_stay_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    token = "PLAINTEXT-token-7f3a"
    seen: list[str] = []

    def save_token(token: str, session_state: dict[str, Any]) -> str:
        """Keep the user's API token.

        Args:
            token: The token.
        """
        session_state["api_token"] = token
        return "saved"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if _is_summary_request(messages):
            seen.append(messages[-1].content or "")
            return ModelResponse(content="The user saved a token.")
        if messages[-1].role == "tool":
            return ModelResponse(content=f"I saved {token}")
        return ModelResponse(tool_calls=[ToolCall("save_token", {"token": token}, "c1")])

    agent = Agent(
        model=FunctionModel(model),
        db=SqliteDb(db_file=str(tmp_path / "s.db")),
        tools=[save_token],
        secret_keys=["api_token"],
        enable_session_summaries=True,
    )
    agent.run(f"save {token}", session_id="s1")
    assert seen and token not in seen[0] and "***" in seen[0]


def test_a_team_keeps_a_summary_too(tmp_path: Path) -> None:
    script = Script()
    team = Team(
        name="desk",
        model=FunctionModel(script),
        members=[Agent(name="helper", model=FunctionModel(lambda m, i: "done"))],
        db=SqliteDb(db_file=str(tmp_path / "s.db")),
        enable_session_summaries=True,
    )
    run = team.run("apples", session_id="t1")
    summary = team.get_session_summary("t1")
    assert summary is not None and summary.last_run_id == run.run_id


def test_a_bad_manager_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="max_runs_per_update"):
        SessionSummaryManager(max_runs_per_update=0)


def test_a_streamed_run_is_summarized_after_its_last_event(tmp_path: Path) -> None:
    import asyncio

    agent = _agent(tmp_path, Script())

    async def stream() -> list[str]:
        events = await agent.arun("apples", session_id="s1", stream=True)
        return [type(e).__name__ async for e in events]

    kinds = asyncio.run(stream())
    assert kinds[-1] == "RunCompleted"
    assert agent.get_session_summary("s1").summary == "talked about apples"  # type: ignore[union-attr]


def test_the_session_service_reads_a_summary(tmp_path: Path) -> None:
    from statewise import Sessions

    agent = _agent(tmp_path, Script())
    agent.run("apples", session_id="s1")
    sessions = Sessions(f"sqlite:///{tmp_path / 's.db'}")
    assert sessions.get_session_summary("s1").summary == "talked about apples"  # type: ignore[union-attr]
