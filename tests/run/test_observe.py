"""Seeing what a run did: `debug_mode` / `STATEWISE_LOG=debug` logging, warnings about
unknown template keys, `strict_templates`, OpenTelemetry spans (SDK in-memory exporter on
the global tracer provider, no statewise setup call), and real workflow metrics."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from statewise import Agent, RunContext, Step, Team, Workflow
from statewise.db import SqliteDb
from statewise.exceptions import TemplateKeyError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from tests._env import subprocess_env, without_modules

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _global_tracer_provider() -> None:
    """The SDK on the global provider, as an application would set it up (once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)


@pytest.fixture()
def spans() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture()
def debug_records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="statewise")
    return caplog


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item.

    Args:
        item: the item
    """
    session_state["items"].append(item)
    return f"added {item}"


def adder_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content=f"done: {messages[-1].content}")
    return ModelResponse(tool_calls=[ToolCall("add_item", {"item": messages[-1].content}, "c1")])


def make_agent(name: str = "shopper", **kwargs: Any) -> Agent:
    return Agent(
        name=name,
        model=FunctionModel(adder_model, id="adder-model"),
        tools=[add_item],
        session_state={"items": []},
        instructions="Items: {items}",
        **kwargs,
    )


def messages_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "statewise"]


# ---- logging ---------------------------------------------------------------------------


def test_debug_mode_logs_requests_tool_calls_and_commits(
    debug_records: pytest.LogCaptureFixture,
) -> None:
    agent = make_agent(debug_mode=True)
    agent.run("milk", session_id="s1")
    text = "\n".join(messages_of(debug_records))
    # The model request: the system prompt as rendered, the message count, the tools.
    assert "model request function:adder-model (step 1): 2 messages, tools ['add_item']" in text
    assert "Items: []" in text and 'Items: ["milk"]' in text
    # The tool call with its arguments and result.
    assert 'tool call add_item({"item": "milk"})' in text
    assert "tool result: added milk" in text
    # Each commit with its ops and version.
    assert "commit: versions {'session': 2}, 1 ops" in text and '"op": "append"' in text


def test_without_debug_mode_nothing_is_logged_until_statewise_log_says_so(
    debug_records: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent()
    agent.run("milk", session_id="s1")
    assert messages_of(debug_records) == []
    monkeypatch.setenv("STATEWISE_LOG", "debug")
    agent.run("eggs", session_id="s1")
    assert any("tool call add_item" in m for m in messages_of(debug_records))


def test_a_runs_observation_ends_with_it_quiet_traced_or_failed(
    debug_records: pytest.LogCaptureFixture,
) -> None:
    """A run's observation ends however the run ends (quiet, traced or failed); a member
    with `debug_mode` logs inside a team that does not."""

    def broken(messages: list[Message], info: RequestInfo) -> ModelResponse:
        raise RuntimeError("model down")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
        make_agent().run("milk", session_id="quiet")
        with pytest.raises(RuntimeError, match="model down"):
            Agent(model=FunctionModel(broken)).run("x", session_id="failed")
        leader = Team(
            name="household",
            members=[make_agent(debug_mode=True)],
            model=FunctionModel(
                lambda messages, info: (
                    ModelResponse(content="done")
                    if messages[-1].role == "tool"
                    else ModelResponse(
                        tool_calls=[
                            ToolCall(
                                "delegate_task_to_member",
                                {"member_name": "shopper", "task": "eggs"},
                            )
                        ]
                    )
                )
            ),
        )
        leader.run("go", session_id="team")
    make_agent().run("bread", session_id="traced")
    text = "\n".join(messages_of(debug_records))
    assert "[shopper]" in text and "tool call add_item" in text and "[household]" not in text


def test_debug_mode_logs_conflicts(debug_records: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    db_file = tmp_path / "c.db"
    other = Agent(db=SqliteDb(db_file=db_file))

    def set_color(run_context: RunContext, value: str) -> str:
        run_context.session_state["color"] = value
        other.state.for_session(run_context.session_id).set("color", "blue")  # meanwhile
        return "set"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="ok")
        return ModelResponse(tool_calls=[ToolCall("set_color", {"value": "red"}, "c")])

    agent = Agent(
        model=FunctionModel(model),
        tools=[set_color],
        db=SqliteDb(db_file=db_file),
        session_state={"color": "none"},
        debug_mode=True,
    )
    out = agent.run("paint", session_id="c")
    assert out.conflicts
    conflicts = [m for m in messages_of(debug_records) if "conflict resolved" in m]
    assert conflicts and '"theirs": "blue", "ours": "red"' in conflicts[0]


def test_workflow_debug_mode_logs_its_agents(debug_records: pytest.LogCaptureFixture) -> None:
    workflow = Workflow(
        name="wf",
        steps=[Step(name="shop", agent=make_agent())],
        session_state={"items": []},
        debug_mode=True,
    )
    workflow.run("milk")
    text = "\n".join(messages_of(debug_records))
    assert "workflow run" in text and "step shop started" in text
    assert "[shopper] tool call add_item" in text


def test_unknown_template_key_is_warned_once_per_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="statewise")
    agent = Agent(
        name="greeter",
        model=FunctionModel(lambda messages, info: "hi"),
        instructions="Hello {user_name}, you like {colour}. Optional: {maybe?}",
    )
    agent.run("a")
    agent.run("b")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(r.getMessage().split("{")[1].split("}")[0] for r in warnings) == [
        "colour",
        "user_name",
    ]
    assert all(r.getMessage().startswith("greeter: instructions reference") for r in warnings)


def test_strict_templates_makes_an_unknown_key_an_error_naming_it() -> None:
    agent = Agent(
        name="greeter",
        model=FunctionModel(lambda messages, info: "hi"),
        instructions="Hello {user_name}",
        strict_templates=True,
    )
    with pytest.raises(TemplateKeyError, match=r"instructions reference \{user_name\}") as err:
        agent.run("a")
    assert err.value.key == "user_name"
    assert agent.run("a", session_state={"user_name": "Ann"}).content == "hi"


# ---- OpenTelemetry ---------------------------------------------------------------------


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def parent_of(span: ReadableSpan, exporter: InMemorySpanExporter) -> ReadableSpan | None:
    if span.parent is None:
        return None
    for candidate in exporter.get_finished_spans():
        if candidate.context is not None and candidate.context.span_id == span.parent.span_id:
            return candidate
    return None


def ancestors(span: ReadableSpan, exporter: InMemorySpanExporter) -> list[str]:
    names = []
    current = parent_of(span, exporter)
    while current is not None:
        names.append(current.name)
        current = parent_of(current, exporter)
    return names


def test_agent_run_spans_follow_genai_conventions(spans: InMemorySpanExporter) -> None:
    agent = make_agent()
    tracer = trace.get_tracer("my-app")
    with tracer.start_as_current_span("request from my app"):
        out = agent.run("milk", session_id="s1")
    named = by_name(spans)
    run = named["invoke_agent shopper"][0]
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["statewise.session_id"] == "s1"
    assert parent_of(run, spans) is named["request from my app"][0]
    chats = named["chat adder-model"]
    assert len(chats) == 2
    first: dict[str, Any] = dict(chats[0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "adder-model"
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    tokens = [cast(int, dict(c.attributes or {})["gen_ai.usage.input_tokens"]) for c in chats]
    assert sum(tokens) == out.metrics.input_tokens
    tool = named["execute_tool add_item"][0]
    assert tool.attributes is not None and tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert ancestors(tool, spans) == [
        "step shopper #1",
        "invoke_agent shopper",
        "request from my app",
    ]
    commits = named["statewise.commit"]
    with_op = [c for c in commits if c.attributes and c.attributes["statewise.commit.op_count"]]
    step_commit = next(
        c for c in with_op if c.attributes and c.attributes["statewise.commit.source"] == "step"
    )
    assert step_commit.attributes is not None
    assert step_commit.attributes["statewise.session_id"] == "s1"
    assert step_commit.attributes["statewise.version"] == 2
    assert step_commit.attributes["statewise.commit.conflicts"] == 0
    assert ancestors(step_commit, spans)[:2] == ["step shopper #1", "invoke_agent shopper"]
    trace_ids = {s.context.trace_id for s in spans.get_finished_spans() if s.context}
    assert len(trace_ids) == 1


def test_spans_nest_across_teams_inside_workflows(spans: InMemorySpanExporter) -> None:
    def leader(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="team done")
        call = ToolCall("delegate_task_to_member", {"member_name": "shopper", "task": "milk"}, "d")
        return ModelResponse(tool_calls=[call])

    team = Team(name="household", members=[make_agent()], model=FunctionModel(leader))
    workflow = Workflow(
        name="wf", steps=[Step(name="by-team", team=team)], session_state={"items": []}
    )
    out = workflow.run("go")
    named = by_name(spans)
    member_tool = named["execute_tool add_item"][0]
    assert ancestors(member_tool, spans) == [
        "step shopper #1",
        "invoke_agent shopper",
        "execute_tool delegate_task_to_member",
        "step household #1",
        "invoke_agent household",
        "step by-team",
        "invoke_workflow wf",
    ]
    assert out.metrics.model_requests == 4 and out.metrics.tool_calls == 2


def test_a_workflow_steps_commit_is_a_child_of_that_steps_span(
    spans: InMemorySpanExporter,
) -> None:
    workflow = Workflow(
        name="wf",
        steps=[Step(name="first", agent=make_agent()), Step(name="second", agent=make_agent())],
        session_state={"items": []},
    )
    workflow.run("milk")
    step_commits = {
        str(dict(c.attributes or {})["statewise.commit.source"]): c
        for c in by_name(spans)["statewise.commit"]
        if str(dict(c.attributes or {})["statewise.commit.source"]).startswith("step:")
    }
    assert set(step_commits) == {"step:first", "step:second"}
    for name, commit in step_commits.items():
        assert ancestors(commit, spans) == [name.replace(":", " "), "invoke_workflow wf"]


def test_spans_are_skipped_silently_without_opentelemetry(tmp_path: Path) -> None:
    script = without_modules("opentelemetry") + (
        "from statewise import Agent\n"
        "from statewise.models import FunctionModel\n"
        "agent = Agent(model=FunctionModel(lambda m, i: 'hi'), debug_mode=True)\n"
        "print(agent.run('x').content)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hi"
    assert "statewise DEBUG" in done.stderr and "model request" in done.stderr


# ---- metrics -------------------------------------------------------------------------


def test_workflow_with_an_agent_step_reports_real_metrics(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "wf.db")
    workflow = Workflow(
        name="wf",
        db=db,
        steps=[Step(name="shop", agent=make_agent()), lambda step_input: "after"],
        session_state={"items": []},
    )
    out = workflow.run("milk", session_id="w")
    metrics = out.metrics
    assert metrics.model_requests == 2 and metrics.tool_calls == 1
    assert metrics.input_tokens > 0 and metrics.output_tokens > 0
    assert metrics.total_tokens == metrics.input_tokens + metrics.output_tokens
    stored = db.read_runs("w")[-1].metrics
    assert stored["model_requests"] == 2 and stored["tool_calls"] == 1


@pytest.mark.parametrize("how", ["env", "flag"])
def test_cli_logs_through_rich_with_statewise_log_or_debug(how: str, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "shopping_list.py"
    args = ["--debug"] if how == "flag" else []
    env = subprocess_env(STATEWISE_LOG="debug") if how == "env" else subprocess_env()
    done = subprocess.run(
        [sys.executable, "-m", "statewise", "run", str(example), "Add milk", *args],
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "DEBUG" in done.stderr and "statewise DEBUG" not in done.stderr  # rich, not plain
    assert 'tool call add_item({"item": "milk"})' in done.stderr
    assert "commit: versions {'session': 2}" in done.stderr
