"""Named OpenAI-compatible hosts: each name resolves to its base URL and its own key
variable, from the one table in `statewise.models.hosts` (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewise.exceptions import ModelAuthenticationError
from statewise.models import Message, RequestInfo, infer_model
from statewise.models._guard import allow_model_requests
from statewise.models.hosts import HOSTS
from statewise.models.openai_chat import OpenAIChat

DOCS = Path(__file__).parents[2] / "docs" / "providers.md"
EXPECTED = {
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "mistral": ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    "fireworks": ("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "vllm": ("http://localhost:8000/v1", "VLLM_API_KEY"),
    "lmstudio": ("http://localhost:1234/v1", "LMSTUDIO_API_KEY"),
    "ollama": ("http://localhost:11434/v1", "OLLAMA_API_KEY"),
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for host in HOSTS.values():
        monkeypatch.delenv(host.key_env, raising=False)
        if host.url_env:
            monkeypatch.delenv(host.url_env, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key-not-for-other-hosts")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")


def test_the_table_is_the_expected_one() -> None:
    assert {name: (h.base_url, h.key_env) for name, h in HOSTS.items()} == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_resolves_to_its_url_and_key(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url, key_env = EXPECTED[name]
    monkeypatch.setenv(key_env, f"{name}-secret")
    model = infer_model(f"{name}:some/model-1")
    assert isinstance(model, OpenAIChat)
    assert (model.name, model.id, model.base_url, model.api_key) == (
        f"{name}:some/model-1",
        "some/model-1",
        url,
        f"{name}-secret",
    )


@pytest.mark.parametrize(
    "name", ["groq", "together", "openrouter", "deepseek", "mistral", "fireworks"]
)
@pytest.mark.anyio
async def test_a_cloud_host_without_its_key_names_its_variable(name: str) -> None:
    model = infer_model(f"{name}:m")
    assert isinstance(model, OpenAIChat)
    assert model.api_key is None  # OPENAI_API_KEY is never borrowed
    # Refused before any I/O, so the switch may be on without a server.
    with (
        allow_model_requests(True),
        pytest.raises(ModelAuthenticationError, match=f"set {EXPECTED[name][1]}"),
    ):
        await model.request([Message(role="user", content="hi")], RequestInfo())


@pytest.mark.parametrize("name", ["vllm", "lmstudio", "ollama"])
def test_local_servers_need_no_key(name: str) -> None:
    model = infer_model(f"{name}:m")
    assert isinstance(model, OpenAIChat)
    assert model.api_key == name  # a placeholder the SDK needs; the server ignores it


@pytest.mark.parametrize(
    ("name", "env", "value", "url"),
    [
        ("vllm", "VLLM_BASE_URL", "http://gpu-box:8000/v1", "http://gpu-box:8000/v1"),
        ("lmstudio", "LMSTUDIO_BASE_URL", "http://mac:1234/v1/", "http://mac:1234/v1"),
        ("ollama", "OLLAMA_HOST", "0.0.0.0:9999", "http://0.0.0.0:9999/v1"),
    ],
)
def test_local_server_urls_from_the_environment(
    name: str, env: str, value: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env, value)
    model = infer_model(f"{name}:m")
    assert isinstance(model, OpenAIChat)
    assert model.base_url == url


def test_the_docs_table_lists_every_host() -> None:
    text = DOCS.read_text()
    for name, (url, key_env) in EXPECTED.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{name}:")), None)
        assert row is not None, f"docs/providers.md has no row for {name}:"
        assert url in row and key_env in row, row
