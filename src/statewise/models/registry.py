"""`"provider:model"` strings to `Model` objects.

Each built-in factory imports its provider module only when called, so `infer_model`
works in a core install and only the provider actually used needs its SDK.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from statewise.exceptions import ConfigurationError
from statewise.models.base import Model

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


def ollama_base_url() -> str:
    """The OpenAI-compatible endpoint of Ollama: `OLLAMA_HOST` (as Ollama spells it,
    `host:port` or a URL) plus `/v1`, or `http://localhost:11434/v1`."""
    host = os.environ.get("OLLAMA_HOST", "").strip() or "http://localhost:11434"
    if "://" not in host:
        host = f"http://{host}"
    host = host.rstrip("/")
    return host if host.endswith("/v1") else f"{host}/v1"


def _ollama(model_id: str) -> Model:
    from statewise.models.openai_chat import OpenAIChat

    # Ollama ignores the key, but the SDK refuses to start without one.
    return OpenAIChat(id=model_id, base_url=ollama_base_url(), api_key="ollama", provider="ollama")


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
    "anthropic": _anthropic,
    "ollama": _ollama,
    "openai": _openai,
    "openai-compatible": _openai_compatible,
    "openai-responses": _openai_responses,
    "test": _test,
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
