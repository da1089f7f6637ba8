"""Turning failures of the (Stainless-generated) OpenAI and Anthropic SDKs into ours.

Both SDKs raise the same shapes: `APIStatusError` (with `status_code`, `response` and the
decoded `body`), `APIConnectionError` (and its `APITimeoutError`), and
`APIResponseValidationError`. A provider hands its SDK's classes in as `SdkErrors`, so this
module never imports an SDK. Messages name the provider, the model, the status and the
provider's own message, and never contain the API key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statewise.exceptions import (
    ContextLengthExceededError,
    MalformedResponseError,
    ModelAuthenticationError,
    ModelError,
    ModelHTTPError,
    ModelRateLimitError,
)
from statewise.models._retry import Retryable, parse_retry_after, status_is_retryable


@dataclass(frozen=True, kw_only=True)
class SdkErrors:
    """The exception classes of one SDK, and how that provider reports context overflow."""

    status: type[Exception]
    connection: type[Exception]
    validation: type[Exception]
    api: type[Exception]
    is_context_length: Callable[[int, Any, str], bool]


def error_message(body: Any) -> str:
    """The provider's own words: `error.message` or `message` of a JSON body, else text."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
        return json.dumps(body)[:500]
    return str(body)[:500] if body is not None else ""


def error_code(body: Any) -> str | None:
    """`error.code` or `code` of a JSON error body."""
    if isinstance(body, dict):
        inner = body.get("error")
        code = inner.get("code") if isinstance(inner, dict) else body.get("code")
        return str(code) if code is not None else None
    return None


def classify(sdk: SdkErrors) -> Callable[[Exception], Retryable | None]:
    """The retry classifier for `with_retries`: which SDK failures deserve another go."""

    def verdict(exc: Exception) -> Retryable | None:
        if isinstance(exc, sdk.status):
            response = getattr(exc, "response", None)
            headers = dict(response.headers) if response is not None else {}
            if status_is_retryable(int(getattr(exc, "status_code", 0)), headers):
                return Retryable(retry_after=parse_retry_after(headers))
            return None
        if isinstance(exc, sdk.connection):
            return Retryable()
        return None

    return verdict


def translate(
    exc: Exception, sdk: SdkErrors, *, provider: str, model: str, api_key: str | None
) -> Exception:
    """Our exception for an SDK failure; anything unknown is returned unchanged."""
    prefix = f"{provider} model {model!r}"
    if isinstance(exc, sdk.status):
        status = int(getattr(exc, "status_code", 0))
        body = getattr(exc, "body", None)
        message = _redact(error_message(body) or str(exc), api_key)
        text = f"{prefix}: HTTP {status}: {message}"
        if status < 400:  # an error event inside a successful stream
            return ModelError(f"{prefix}: error event in stream: {message}")
        if status in (401, 403):
            return ModelAuthenticationError(text, status_code=status, body=body)
        if status == 429:
            return ModelRateLimitError(
                f"{text} (still rate limited after retries)", status_code=status, body=body
            )
        if sdk.is_context_length(status, body, message):
            return ContextLengthExceededError(text, status_code=status, body=body)
        return ModelHTTPError(text, status_code=status, body=body)
    if isinstance(exc, sdk.validation):
        return MalformedResponseError(f"{prefix}: the response does not parse: {exc}")
    if isinstance(exc, sdk.connection):
        return ModelError(f"{prefix}: no response ({type(exc).__name__}: {exc})")
    if isinstance(exc, sdk.api):  # an error event inside a stream
        return ModelError(
            f"{prefix}: {_redact(error_message(getattr(exc, 'body', None)) or str(exc), api_key)}"
        )
    if isinstance(exc, json.JSONDecodeError):
        return MalformedResponseError(f"{prefix}: the response is not JSON: {exc}")
    return exc


def _redact(text: str, api_key: str | None) -> str:
    return text.replace(api_key, "***") if api_key and len(api_key) >= 4 else text
