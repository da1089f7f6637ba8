from __future__ import annotations

import os
import subprocess
import sys

import pytest

import statewise.models
from statewise.exceptions import ConfigurationError, ModelRequestsDisabledError
from statewise.models import (
    FunctionModel,
    Message,
    Model,
    RequestInfo,
    TestModel,
    infer_model,
    register_provider,
)
from statewise.models import registry as registry_module
from statewise.models.anthropic import Claude
from statewise.models.openai_chat import OpenAIChat
from statewise.models.openai_responses import OpenAIResponses


def test_model_instances_pass_through() -> None:
    model = TestModel()
    assert infer_model(model) is model


def test_test_spec() -> None:
    assert isinstance(infer_model("test"), TestModel)
    assert infer_model("test:custom").id == "custom"


def test_builtin_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    chat = infer_model("openai:gpt-4o-mini")
    assert isinstance(chat, OpenAIChat)
    assert (chat.name, chat.base_url) == ("openai:gpt-4o-mini", None)
    responses = infer_model("openai-responses:gpt-4.1")
    assert isinstance(responses, OpenAIResponses)
    assert responses.name == "openai-responses:gpt-4.1"
    claude = infer_model("anthropic:claude-sonnet-4-5")
    assert isinstance(claude, Claude)
    assert claude.name == "anthropic:claude-sonnet-4-5"


@pytest.mark.parametrize(
    ("host", "url"),
    [
        (None, "http://localhost:11434/v1"),
        ("0.0.0.0:9999", "http://0.0.0.0:9999/v1"),
        ("https://ollama.internal/", "https://ollama.internal/v1"),
        ("http://box:11434/v1", "http://box:11434/v1"),
    ],
)
def test_ollama(monkeypatch: pytest.MonkeyPatch, host: str | None, url: str) -> None:
    if host is None:
        monkeypatch.delenv("OLLAMA_HOST", raising=False)
    else:
        monkeypatch.setenv("OLLAMA_HOST", host)
    model = infer_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChat)
    assert (model.name, model.base_url, model.api_key) == ("ollama:llama3.2", url, "ollama")


def test_openai_compatible() -> None:
    model = infer_model("openai-compatible:Qwen/Qwen2.5-7B@http://127.0.0.1:8000/v1")
    assert isinstance(model, OpenAIChat)
    assert (model.id, model.base_url, model.provider) == (
        "Qwen/Qwen2.5-7B",
        "http://127.0.0.1:8000/v1",
        "openai-compatible",
    )
    with pytest.raises(ConfigurationError, match="openai-compatible:<model>@<base_url>"):
        infer_model("openai-compatible:llama3")


@pytest.mark.parametrize("spec", ["mystery:model", "gpt-4o", "openai:"])
def test_unknown_or_incomplete_specs(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        infer_model(spec)
    if spec != "openai:":
        assert "anthropic, azure, bedrock, deepseek, fireworks, gemini, google, groq" in str(
            info.value
        )


def test_register_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_PROVIDERS", dict(registry_module._PROVIDERS))
    register_provider("echo", lambda rest: FunctionModel(lambda m, i: rest, id=rest))
    model = infer_model("echo:hello")
    assert isinstance(model, FunctionModel) and model.id == "hello"
    with pytest.raises(ConfigurationError):
        register_provider("bad:prefix", lambda rest: TestModel())


@pytest.mark.anyio
async def test_switch_blocks_real_providers_not_offline_ones() -> None:
    assert statewise.models.ALLOW_MODEL_REQUESTS is False  # set by conftest
    info = RequestInfo()
    messages = [Message(role="user", content="hi")]
    specs = ["openai:x", "openai-responses:x", "anthropic:x", "ollama:x", "groq:x", "azure:x"]
    for spec in [*specs, "google:x", "vertex:x", "bedrock:x"]:
        model: Model = infer_model(spec)
        with pytest.raises(ModelRequestsDisabledError):
            await model.request(messages, info)
    assert (await infer_model("test").request(messages, info)).content
    assert (await FunctionModel(lambda m, i: "ok").request(messages, info)).content == "ok"


def test_all_is_sorted_and_complete() -> None:
    names = statewise.models.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(statewise.models, name) is not None
    assert statewise.models.OpenAIChat is OpenAIChat


def test_core_import_loads_no_sdk() -> None:
    code = (
        "import sys, statewise.models as m; m.infer_model('test');"
        "print(sorted(k for k in ('openai', 'anthropic', 'httpx2', 'google.genai', 'boto3')"
        " if k in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout
    assert out.strip() == "[]"
