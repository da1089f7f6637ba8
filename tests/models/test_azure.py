"""Azure OpenAI: the deployment URL, `api-version`, `api-key` header and the Azure
environment variables, against the in-repo Chat Completions fake (aimock runs the
answer/fault matrix in test_aimock.py)."""

from __future__ import annotations

import pytest
from tests.models.fakes import FakeServer
from tests.models.fakes import openai_chat as wire

from statewise.exceptions import ConfigurationError, ModelAuthenticationError
from statewise.models import Message, RequestInfo, infer_model
from statewise.models._guard import allow_model_requests
from statewise.models._retry import RetryPolicy
from statewise.models.azure import DEFAULT_API_VERSION, AzureOpenAIChat

pytestmark = pytest.mark.anyio

HELLO = [Message(role="user", content="hi")]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_AD_TOKEN",
        "OPENAI_API_VERSION",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


async def test_environment_drives_endpoint_key_and_version(
    fake: FakeServer, retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", fake.url)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-key")
    monkeypatch.setenv("OPENAI_API_VERSION", "2025-01-01-preview")
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key-must-not-be-sent")
    fake.enqueue(wire.completion("hello"))
    model = infer_model("azure:my-gpt4o")
    assert isinstance(model, AzureOpenAIChat)
    model.retry = retry
    async with model:
        assert (await model.request(HELLO, RequestInfo())).content == "hello"
    sent = fake.last
    assert (
        sent.path == "/openai/deployments/my-gpt4o/chat/completions?api-version=2025-01-01-preview"
    )
    assert sent.headers["api-key"] == "azure-key"
    assert "openai-key-must-not-be-sent" not in str(sent.headers)
    assert model.name == "azure:my-gpt4o"


async def test_arguments_and_default_version(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(wire.completion("hi"))
    model = AzureOpenAIChat("dep", base_url=fake.url, api_key="k", retry=retry)
    async with model:
        await model.request(HELLO, RequestInfo())
    assert (
        fake.last.path
        == f"/openai/deployments/dep/chat/completions?api-version={DEFAULT_API_VERSION}"
    )


async def test_missing_endpoint_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")  # never a fallback
    model = AzureOpenAIChat("dep", api_key="k")
    with (
        allow_model_requests(True),
        pytest.raises(ConfigurationError, match="AZURE_OPENAI_ENDPOINT"),
    ):
        await model.request(HELLO, RequestInfo())
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")  # never a fallback either
    keyless = AzureOpenAIChat("dep", base_url="https://r.openai.azure.com")
    with (
        allow_model_requests(True),
        pytest.raises(ModelAuthenticationError, match="AZURE_OPENAI_API_KEY"),
    ):
        await keyless.request(HELLO, RequestInfo())
