"""Azure OpenAI: `AzureOpenAIChat`, the Chat Completions provider on the OpenAI SDK's
Azure client.

Azure serves the same Chat Completions wire format as OpenAI under
`{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`, with the
key in an `api-key` header. Everything about the request, the stream and the errors is
`OpenAIChat`'s; only the client differs, and the model id is the *deployment* name.
"""

from __future__ import annotations

import os
from typing import Any

from statewise.exceptions import (
    ConfigurationError,
    MissingDependencyError,
    ModelAuthenticationError,
)
from statewise.models._retry import RetryPolicy
from statewise.models.openai_chat import OpenAIChat

try:
    import openai
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("openai", "openai") from _exc

DEFAULT_API_VERSION = "2024-10-21"
"""The latest generally available data-plane version when this was written; pass
`api_version=` or set `OPENAI_API_VERSION` for a newer one."""


class AzureOpenAIChat(OpenAIChat):
    """A deployment of Azure OpenAI (`azure:<deployment>`).

    `base_url` is the resource endpoint (`https://<resource>.openai.azure.com`), by default
    `AZURE_OPENAI_ENDPOINT`; `api_key` defaults to `AZURE_OPENAI_API_KEY` and `api_version`
    to `OPENAI_API_VERSION`, then `DEFAULT_API_VERSION`. For Entra ID instead of a key,
    pass `azure_ad_token_provider=` (an async callable returning a token).
    """

    def __init__(
        self,
        id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_version: str | None = None,
        azure_ad_token_provider: Any = None,
        timeout: float = 60.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        client: openai.AsyncAzureOpenAI | None = None,
        stream_usage: bool = True,
        **settings: Any,
    ) -> None:
        super().__init__(
            id,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            retry=retry,
            client=client,
            provider="azure",
            stream_usage=stream_usage,
            api_key_env="AZURE_OPENAI_API_KEY",
            **settings,
        )
        # Set after the parent's default: an Azure model never falls back to OPENAI_BASE_URL.
        self.base_url = base_url or os.environ.get("AZURE_OPENAI_ENDPOINT") or None
        self.api_version = (
            api_version or os.environ.get("OPENAI_API_VERSION") or DEFAULT_API_VERSION
        )
        self.azure_ad_token_provider = azure_ad_token_provider

    def _make_client(self) -> openai.AsyncAzureOpenAI:
        if not self.base_url:
            raise ConfigurationError(
                f"azure model {self.id!r}: no endpoint; set AZURE_OPENAI_ENDPOINT or pass "
                "base_url='https://<resource>.openai.azure.com'"
            )
        if not self.api_key and self.azure_ad_token_provider is None:
            raise ModelAuthenticationError(
                f"azure model {self.id!r}: no API key; set AZURE_OPENAI_API_KEY, pass api_key= "
                "or azure_ad_token_provider="
            )
        return openai.AsyncAzureOpenAI(
            azure_endpoint=self.base_url,
            api_key=self.api_key,
            azure_ad_token_provider=self.azure_ad_token_provider,
            api_version=self.api_version,
            max_retries=0,
            timeout=self.timeout,
        )
