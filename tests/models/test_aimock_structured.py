# ruff: noqa: F811 (pytest fixtures shared with test_aimock, used by name)
"""Typed answers against `@copilotkit/aimock`, for every provider: each asks for the schema
the way its API expects (OpenAI Chat and Azure `response_format` json_schema, strict when
the schema allows; OpenAI Responses `text.format`; Gemini and Vertex `responseJsonSchema`;
Anthropic and Bedrock a final-answer tool the model must call), and the answer, whole and
streamed, comes back parsed and validated. Where aimock's journal shows a request converted
to chat, the wire shape is checked on the in-repo fakes (here, test_google, test_bedrock)."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict
from tests.models.aimock import AimockServer
from tests.models.fakes import SleepRecorder
from tests.models.fakes import anthropic as anthropic_fake
from tests.models.fakes import openai_responses as responses_fake
from tests.models.fakes.server import FakeServer
from tests.models.test_aimock import (  # noqa: F401 (fixtures)
    PROVIDERS,
    Provider,
    aimock,
    aimock_server,
    aimock_unkeyed_server,
    model_for,
    prompt,
    provider,
    stream,
)

from statewise import Agent
from statewise.exceptions import OutputValidationError
from statewise.models.anthropic import Claude
from statewise.models.openai_responses import OpenAIResponses
from statewise.run.events import RunCompleted

pytestmark = pytest.mark.anyio


class Triage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priority: Literal["low", "high"]
    summary: str


ANSWER = {"priority": "high", "summary": "the disk is full"}
TOOL_ANSWERS = ("anthropic", "bedrock")  # no native structured output: the final-answer tool


def _fixture(provider: Provider, text: str, answer: dict[str, Any]) -> dict[str, Any]:
    if provider.name in TOOL_ANSWERS:  # the answer as the final-answer tool's input
        response: dict[str, Any] = {"toolCalls": [{"name": "final_answer", "arguments": answer}]}
    else:
        response = {"content": json.dumps(answer)}
    return {"match": {"userMessage": text}, "response": response}


async def _run(agent: Agent[Triage], text: str, stream: bool) -> Triage:
    if not stream:
        return (await agent.arun(text)).content
    events = [e async for e in await agent.arun(text, stream=True)]
    done = [e for e in events if isinstance(e, RunCompleted)]
    assert done, events
    content: Triage = done[-1].output.content
    return content


async def test_the_request_carries_the_schema_and_the_answer_is_typed(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add(_fixture(provider, text, ANSWER))
    model = model_for(provider, aimock, sleeps)
    agent: Agent[Triage] = Agent(model=model, output_schema=Triage)
    answer = await _run(agent, text, stream)
    await model.aclose()
    assert answer == Triage(**ANSWER)
    [request] = [e for e in aimock.journal() if e["method"] == "POST"]
    body = request["body"]
    schema = Triage.model_json_schema()
    if provider.name in ("openai-chat", "azure"):
        assert body["response_format"]["type"] == "json_schema"
        sent = body["response_format"]["json_schema"]
        assert sent["name"] == "Triage" and sent["schema"] == schema
        assert sent["strict"] is True  # every property required, no others
    elif provider.name in TOOL_ANSWERS:  # the journal shows tools as chat functions
        names = [t["function"]["name"] for t in body["tools"]]
        assert names == ["final_answer"]
    else:  # Responses, Gemini: the journal keeps the body as chat; wire shapes on the fakes
        assert not body.get("tools")


async def test_an_answer_that_does_not_fit_is_retried_then_fails(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder
) -> None:
    text = prompt()
    wrong = {"priority": "urgent", "summary": "x"}
    retry = "does not fit the required schema Triage"  # the retry prompt, with the reason
    aimock.add(_fixture(provider, text, wrong), _fixture(provider, retry, wrong))
    model = model_for(provider, aimock, sleeps)
    agent: Agent[Triage] = Agent(model=model, output_schema=Triage)
    with pytest.raises(OutputValidationError, match="priority"):
        await agent.arun(text)
    await model.aclose()
    posts = [e for e in aimock.journal() if e["method"] == "POST"]
    assert len(posts) == 2  # the answer and one retry, which carried the reason
    assert retry in str(posts[1]["body"]) and "priority" in str(posts[1]["body"])


async def test_responses_asks_with_text_format(fake: FakeServer) -> None:
    """aimock's journal shows a Responses request converted to chat, so the request's own
    shape is checked on the in-repo server speaking the Responses wire format."""
    fake.replies.append(responses_fake.response([responses_fake.message_item(json.dumps(ANSWER))]))
    model = OpenAIResponses("gpt-4o", base_url=fake.url + "/v1", api_key="k")
    agent: Agent[Triage] = Agent(model=model, output_schema=Triage)
    assert (await agent.arun("triage")).content == Triage(**ANSWER)
    await model.aclose()
    fmt = fake.received[0].json["text"]["format"]
    assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", "Triage", True)
    assert fmt["schema"] == Triage.model_json_schema()


async def test_anthropic_asks_with_a_final_answer_tool_it_must_use(fake: FakeServer) -> None:
    fake.replies.append(
        anthropic_fake.message([anthropic_fake.tool_use("toolu_1", "final_answer", ANSWER)])
    )
    model = Claude("claude-mock", base_url=fake.url, api_key="k")
    agent: Agent[Triage] = Agent(model=model, output_schema=Triage)
    assert (await agent.arun("triage")).content == Triage(**ANSWER)
    await model.aclose()
    body = fake.received[0].json
    assert body["tool_choice"] == {"type": "any"}
    [tool] = body["tools"]
    assert tool["name"] == "final_answer" and tool["input_schema"] == Triage.model_json_schema()
