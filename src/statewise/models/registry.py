"""`"provider:model"` strings to `Model` objects.

Each built-in factory imports its provider module only when called, so `infer_model`
works in a core install and only the provider actually used needs its SDK. The named
OpenAI-compatible hosts (`groq:`, `ollama:`, ...) come from the one table in `hosts`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from statewise.exceptions import ConfigurationError
from statewise.models.base import Model
from statewise.models.hosts import HOSTS, Host

ProviderFactory = Callable[[str], Model]
"""Builds a model from the part of the spec after `prefix:`."""

_COMPATIBLE = re.compile(r"^(?P<id>[^@]+)@(?P<url>https?://\S+)$")


def _openai(model_id: str) -> Model:
    from statewise.models.openai_chat import OpenAIChat

    return OpenAIChat(id=model_id)


def _openai_responses(model_id: str) -> Model:
    from statewise.models.openai_responses import OpenAIResponses

    return OpenAIResponses(id=model_id)


def _anthropic(model_id: str) -> Model:
    from statewise.models.anthropic import Claude

    return Claude(id=model_id)


def _azure(model_id: str) -> Model:
    from statewise.models.azure import AzureOpenAIChat

    return AzureOpenAIChat(id=model_id)


def _google(model_id: str) -> Model:
    from statewise.models.google import Gemini

    return Gemini(id=model_id)


def _vertex(model_id: str) -> Model:
    from statewise.models.google import Gemini

    return Gemini(id=model_id, vertexai=True)


def _bedrock(model_id: str) -> Model:
    from statewise.models.bedrock import Bedrock

    return Bedrock(id=model_id)


def _named_host(host: Host) -> ProviderFactory:
    def factory(model_id: str) -> Model:
        from statewise.models.openai_chat import OpenAIChat

        return OpenAIChat(
            id=model_id,
            base_url=host.url(),
            api_key=host.api_key(),
            api_key_env=host.key_env,
            provider=host.name,
        )

    return factory


def _openai_compatible(rest: str) -> Model:
    match = _COMPATIBLE.match(rest)
    if match is None:
        raise ConfigurationError(
            f"expected 'openai-compatible:<model>@<base_url>' "
            f"(for example 'openai-compatible:llama3@http://localhost:8000/v1'), got {rest!r}"
        )
    from statewise.models.openai_chat import OpenAIChat

    return OpenAIChat(
        id=match["id"],
        base_url=match["url"],
        api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
        provider="openai-compatible",
    )


def _test(model_id: str) -> Model:
    from statewise.models.test import TestModel

    return TestModel(id=model_id or "test")


_PROVIDERS: dict[str, ProviderFactory] = {
    **{name: _named_host(host) for name, host in HOSTS.items()},
    "anthropic": _anthropic,
    "azure": _azure,
    "bedrock": _bedrock,
    "gemini": _google,
    "google": _google,
    "openai": _openai,
    "openai-compatible": _openai_compatible,
    "openai-responses": _openai_responses,
    "test": _test,
    "vertex": _vertex,
}


def register_provider(prefix: str, factory: ProviderFactory) -> None:
    """Make `infer_model(f"{prefix}:<model>")` call `factory("<model>")`.

    Registering an existing prefix replaces it (that is how to point `openai:` at a
    custom subclass).
    """
    if not prefix or ":" in prefix or prefix != prefix.strip():
        raise ConfigurationError(
            f"a provider prefix is a non-empty word without ':', got {prefix!r}"
        )
    _PROVIDERS[prefix] = factory


def known_prefixes() -> list[str]:
    return sorted(_PROVIDERS)


def infer_model(spec: str | Model) -> Model:
    """Return `spec` if it is a model already, else build one from `"provider:model"`.

    `"test"` alone gives a `TestModel`. An unknown prefix raises `ConfigurationError`
    naming the known ones.
    """
    if isinstance(spec, Model):
        return spec
    if not isinstance(spec, str):
        raise ConfigurationError(f"a model is a Model or a 'provider:model' string, got {spec!r}")
    prefix, sep, rest = spec.partition(":")
    if prefix == "test" and not sep:
        return _PROVIDERS["test"]("")
    factory = _PROVIDERS.get(prefix)
    if factory is None or not sep:
        raise ConfigurationError(
            f"unknown model {spec!r}: expected 'provider:model' with provider one of "
            f"{', '.join(known_prefixes())}"
        )
    if not rest and prefix != "test":
        raise ConfigurationError(f"model {spec!r} names no model after {prefix!r}:")
    return factory(rest)
