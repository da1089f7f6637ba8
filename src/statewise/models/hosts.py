"""OpenAI-compatible hosts by name: the one table of their base URLs and key variables.

`infer_model("groq:llama-3.3-70b-versatile")` is `OpenAIChat` pointed at the host's
endpoint with the key from the host's own variable, never `OPENAI_API_KEY`: a key for
one host is not sent to another. A local server (Ollama, vLLM, LM Studio) takes no key
unless it was started with one, so its key variable is optional and a placeholder is
sent without it (the OpenAI SDK refuses to start with no key at all). A host whose URL
varies by installation reads it from `url_env` when that is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Host:
    """Where one OpenAI-compatible host listens and which variable holds its key."""

    name: str
    base_url: str
    key_env: str
    key_required: bool = True
    url_env: str | None = None
    api_path: str = ""
    """Appended to a URL read from `url_env` when missing (`OLLAMA_HOST` is `host:port`)."""

    def url(self) -> str:
        """`base_url`, or the value of `url_env` when set (a bare `host:port` gets
        `http://`, and `api_path` is added if the value lacks it)."""
        value = os.environ.get(self.url_env, "").strip() if self.url_env else ""
        if not value:
            return self.base_url
        if "://" not in value:
            value = f"http://{value}"
        value = value.rstrip("/")
        if self.api_path and not value.endswith(self.api_path):
            value += self.api_path
        return value

    def api_key(self) -> str | None:
        """The key from `key_env`; for a local server, its name as a placeholder."""
        key = os.environ.get(self.key_env) or None
        return key if key or self.key_required else self.name


HOSTS: dict[str, Host] = {
    host.name: host
    for host in (
        Host(name="groq", base_url="https://api.groq.com/openai/v1", key_env="GROQ_API_KEY"),
        Host(name="together", base_url="https://api.together.xyz/v1", key_env="TOGETHER_API_KEY"),
        Host(
            name="openrouter", base_url="https://openrouter.ai/api/v1", key_env="OPENROUTER_API_KEY"
        ),
        Host(name="deepseek", base_url="https://api.deepseek.com/v1", key_env="DEEPSEEK_API_KEY"),
        Host(name="mistral", base_url="https://api.mistral.ai/v1", key_env="MISTRAL_API_KEY"),
        Host(
            name="fireworks",
            base_url="https://api.fireworks.ai/inference/v1",
            key_env="FIREWORKS_API_KEY",
        ),
        Host(
            name="vllm",
            base_url="http://localhost:8000/v1",
            key_env="VLLM_API_KEY",
            key_required=False,
            url_env="VLLM_BASE_URL",
        ),
        Host(
            name="lmstudio",
            base_url="http://localhost:1234/v1",
            key_env="LMSTUDIO_API_KEY",
            key_required=False,
            url_env="LMSTUDIO_BASE_URL",
        ),
        Host(
            name="ollama",
            base_url="http://localhost:11434/v1",
            key_env="OLLAMA_API_KEY",
            key_required=False,
            url_env="OLLAMA_HOST",
            api_path="/v1",
        ),
    )
}
"""Every named OpenAI-compatible host. `docs/providers.md` lists the same rows."""
