"""The retry policy on its own, and transport failures through a real provider."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

import pytest
from tests.models.fakes import FakeServer, Reply, SleepRecorder
from tests.models.fakes import openai_chat as wire

from statewise.exceptions import (
    MalformedResponseError,
    ModelError,
    ModelHTTPError,
    ModelRateLimitError,
)
from statewise.models import Message, ModelResponse, RequestInfo, infer_model
from statewise.models._retry import (
    Retryable,
    RetryPolicy,
    parse_retry_after,
    status_is_retryable,
    with_retries,
)
from statewise.models.openai_chat import OpenAIChat

USER = [Message(role="user", content="hi")]


def test_backoff_doubles_caps_and_jitters() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_delay=3.0, jitter=0.5, random=lambda: 1.0)
    assert [policy.delay(n, None) for n in range(4)] == [0.25, 0.5, 1.0, 1.5]
    exact = RetryPolicy(initial_delay=0.5, max_delay=3.0, jitter=0.0)
    assert [exact.delay(n, None) for n in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert exact.delay(0, 7.0) == 7.0  # the server's wish wins when reasonable


def test_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": date}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("status", "headers", "retry"),
    [
        (429, {}, True),
        (500, {}, True),
        (529, {}, True),
        (408, {}, True),
        (400, {}, False),
        (401, {}, False),
        (400, {"x-should-retry": "true"}, True),
        (503, {"x-should-retry": "false"}, False),
    ],
)
def test_retryable_statuses(status: int, headers: dict[str, str], retry: bool) -> None:
    assert status_is_retryable(status, headers) is retry


@pytest.mark.anyio
async def test_with_retries_gives_up_at_once_on_long_retry_after(sleeps: SleepRecorder) -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise RuntimeError("busy")

    policy = RetryPolicy(max_retries=5, max_retry_after=60.0, sleep=sleeps)
    with pytest.raises(RuntimeError):
        await with_retries(attempt, policy=policy, classify=lambda e: Retryable(retry_after=600))
    assert (calls, sleeps.delays) == (1, [])


@pytest.mark.anyio
async def test_long_retry_after_from_server_is_final(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(wire.error(429, "quota", headers={"retry-after": "3600"}))
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry) as model:
        with pytest.raises(ModelRateLimitError):
            await model.request(USER, RequestInfo())
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_max_retries_zero(fake: FakeServer, sleeps: SleepRecorder) -> None:
    fake.enqueue(wire.error(500, "boom"), wire.completion("never"))
    policy = RetryPolicy(sleep=sleeps)
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=policy, max_retries=0) as m:
        with pytest.raises(ModelError, match="HTTP 500: boom"):
            await m.request(USER, RequestInfo())
    assert len(fake.received) == 1


@pytest.mark.anyio
async def test_connection_refused_is_retried_then_reported(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with OpenAIChat("m", base_url=f"http://127.0.0.1:{port}", api_key="k", retry=retry) as m:
        with pytest.raises(ModelError, match=r"openai model 'm': no response \(APIConnectionError"):
            await m.request(USER, RequestInfo())
    assert sleeps.delays == [0.5, 1.0]


@pytest.mark.anyio
async def test_per_request_timeout(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(Reply(json={}, delay=1.0), wire.completion("late but fine"))
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry, timeout=0.2) as m:
        response = await m.request(USER, RequestInfo())
    assert response.content == "late but fine"
    assert len(fake.received) == 2


@pytest.mark.anyio
async def test_error_inside_chat_stream_is_retried_then_typed(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    overloaded = 'data: {"error": {"message": "model overloaded", "type": "server_error"}}\n\n'
    fake.enqueue(Reply(sse=[overloaded]), wire.stream(["fine"]))
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry) as m:
        chunks = [c async for c in m.request_stream(USER, RequestInfo())]
    final = chunks[-1]
    assert isinstance(final, ModelResponse) and final.content == "fine"
    assert sleeps.delays == [0.5]
    bad = 'data: {"error": {"message": "no such tool", "type": "invalid_request_error"}}\n\n'
    fake.enqueue(Reply(sse=[bad]))
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry) as m:
        with pytest.raises(ModelHTTPError, match="no such tool") as caught:
            [c async for c in m.request_stream(USER, RequestInfo())]
    assert caught.value.status_code == 400
    assert len(fake.received) == 3


@pytest.mark.anyio
async def test_garbage_inside_chat_stream(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(Reply(sse=["data: {not json\n\n", "data: [DONE]\n\n"]))
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry) as m:
        with pytest.raises(MalformedResponseError, match="not JSON"):
            [c async for c in m.request_stream(USER, RequestInfo())]


@pytest.mark.anyio
async def test_stream_without_usage_for_servers_that_reject_it(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.enqueue(wire.stream(["hi"], usage=None))
    async with OpenAIChat(
        "m", base_url=fake.url, api_key="k", retry=retry, stream_usage=False
    ) as m:
        chunks = [c async for c in m.request_stream(USER, RequestInfo())]
    assert "stream_options" not in fake.last.json
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    assert final.usage.requests == 1 and final.usage.total_tokens == 0


def test_one_model_across_event_loops(fake: FakeServer) -> None:
    """Sync façades may run each call in a fresh loop: each loop gets its own client, and
    `asyncio.run` closes it before the loop goes, with no explicit `aclose`."""
    fake.enqueue(wire.completion("one"), wire.completion("two"))
    model = OpenAIChat("m", base_url=fake.url, api_key="k")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = asyncio.run(model.request(USER, RequestInfo()))
        first_client = model.client
        second = asyncio.run(model.request(USER, RequestInfo()))
        assert model.client is not first_client
        assert first_client.is_closed() and model.client.is_closed()
        del first_client
        gc.collect()
    assert (first.content, second.content) == ("one", "two")


@pytest.mark.anyio
async def test_ollama_end_to_end(fake: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", fake.url)
    fake.enqueue(wire.completion("from llama", model="llama3.2"))
    model = infer_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChat)
    async with model:
        response = await model.request(USER, RequestInfo())
    assert (response.content, response.model_name) == ("from llama", "llama3.2")
    assert (fake.last.path, fake.last.headers["authorization"]) == (
        "/v1/chat/completions",
        "Bearer ollama",
    )
