"""Turning failures of the (Stainless-generated) OpenAI and Anthropic SDKs into ours.

Both SDKs raise the same shapes: `APIStatusError` (with `status_code`, `response` and the
decoded `body`), `APIConnectionError` (and its `APITimeoutError`), and
`APIResponseValidationError`. A provider hands its SDK's classes in as `SdkErrors`, so this
module never imports an SDK. Messages name the provider, the model, the status and the
provider's own message, and never contain the API key.

Streams add two kinds of failure the SDKs do not wrap: error *events* inside a stream that
began with 200 (`StreamErrorEvent`, given the HTTP status the same error would have had, so
it maps to the same typed error and retry verdict), and transport errors of the HTTP
library (`httpx` in older SDKs, `httpx2` in newer ones) raised while the body is read.
Every one of them becomes a `ModelError` subclass whose message says how many deltas had
already reached the caller.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from statewise.exceptions import (
    ContextLengthExceededError,
    MalformedResponseError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRateLimitError,
)
from statewise.models._retry import Retryable, parse_retry_after, status_is_retryable


class StreamErrorEvent(Exception):
    """An error the server sent as an event inside a stream that had started with 200.

    `status` is the HTTP status the same error has when sent as a response (429 for a rate
    limit, 529 for Anthropic's overload, ...), so it is classified and translated like one.
    """

    def __init__(self, status: int, body: Any, message: str, *, retryable: bool | None = None):
        super().__init__(message)
        self.status_code = status
        self.body = body
        self.message = message
        self.retryable = retryable


# Anthropic's error `type`s and the status each comes with as a response.
ANTHROPIC_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

# OpenAI's error `code`s / `type`s (streams carry these, not a status).
OPENAI_ERROR_STATUS = {
    "invalid_request_error": 400,
    "invalid_prompt": 400,
    "context_length_exceeded": 400,
    "invalid_api_key": 401,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "model_not_found": 404,
    "rate_limit_exceeded": 429,
    "rate_limit_error": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "api_error": 500,
    "vector_store_timeout": 504,
    "server_is_overloaded": 503,
    "overloaded_error": 529,
}

# Codes that come with a retryable status but never succeed on a retry.
FINAL_CODES = frozenset({"insufficient_quota"})


def status_for(kind: str | None, table: dict[str, int], default: int = 500) -> int:
    return table.get(kind or "", default)


@cache
def transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP libraries' request errors (connection, read, protocol, timeout, decoding),
    for `httpx` and `httpx2`, whichever are installed: the SDKs use one or the other."""
    found: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        error = getattr(module, "RequestError", None)
        if isinstance(error, type) and issubclass(error, Exception):
            found.append(error)
    return tuple(found)


def _is_transport(exc: Exception, sdk: SdkErrors) -> bool:
    return isinstance(exc, (sdk.connection, *transport_errors()))


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
        if isinstance(exc, StreamErrorEvent):
            if exc.retryable is not None:
                return Retryable() if exc.retryable else None
            return Retryable() if status_is_retryable(exc.status_code, {}) else None
        if isinstance(exc, sdk.status):
            response = getattr(exc, "response", None)
            headers = dict(response.headers) if response is not None else {}
            if status_is_retryable(int(getattr(exc, "status_code", 0)), headers):
                return Retryable(retry_after=parse_retry_after(headers))
            return None
        if _is_transport(exc, sdk):
            return Retryable()
        return None

    return verdict


def translate(
    exc: Exception,
    sdk: SdkErrors,
    *,
    provider: str,
    model: str,
    api_key: str | None,
    deltas: int | None = None,
) -> Exception:
    """Our exception for an SDK failure; anything unknown is returned unchanged.

    `deltas` is given for failures while a stream was read: how many deltas had already
    reached the caller (the message says so, since they are part of a lost answer).
    """
    prefix = f"{provider} model {model!r}"
    where = "" if deltas is None else f" ({arrived(deltas)})"
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, StreamErrorEvent):
        status = exc.status_code
        message = _redact(exc.message, api_key)
        text = f"{prefix}: error event in the stream: {message}{where}"
        if status in (401, 403):
            return ModelAuthenticationError(text, status_code=status, body=exc.body)
        if status == 429:
            return ModelRateLimitError(text, status_code=status, body=exc.body)
        if sdk.is_context_length(status, exc.body, message):
            return ContextLengthExceededError(text, status_code=status, body=exc.body)
        return ModelHTTPError(text, status_code=status, body=exc.body)
    if _is_transport(exc, sdk):
        return connection_error(prefix, exc, api_key=api_key, deltas=deltas)
    if isinstance(exc, sdk.status):
        status = int(getattr(exc, "status_code", 0))
        body = getattr(exc, "body", None)
        message = _redact(error_message(body) or str(exc), api_key)
        if status < 400:  # an error event inside a successful stream
            return ModelError(f"{prefix}: error event in stream: {message}")
        return status_error(
            f"{prefix}: HTTP {status}: {message}",
            status,
            body,
            context_length=sdk.is_context_length(status, body, message),
        )
    if isinstance(exc, sdk.validation):
        return MalformedResponseError(f"{prefix}: the response does not parse: {exc}{where}")
    if isinstance(exc, sdk.api):  # an error event inside a stream
        return ModelError(
            f"{prefix}: {_redact(error_message(getattr(exc, 'body', None)) or str(exc), api_key)}"
            f"{where}"
        )
    if isinstance(exc, json.JSONDecodeError):
        return MalformedResponseError(f"{prefix}: the response is not JSON: {exc}{where}")
    return exc


def status_error(
    text: str, status: int, body: Any, *, context_length: bool, auth: bool = False
) -> ModelHTTPError:
    """The typed error for an HTTP error status that retries did not cure: 401/403 (or
    `auth`, for providers that refuse a key with another status), 429, context overflow,
    or any other status."""
    if auth or status in (401, 403):
        return ModelAuthenticationError(text, status_code=status, body=body)
    if status == 429:
        return ModelRateLimitError(
            f"{text} (still rate limited after retries)", status_code=status, body=body
        )
    if context_length:
        return ContextLengthExceededError(text, status_code=status, body=body)
    return ModelHTTPError(text, status_code=status, body=body)


def connection_error(
    prefix: str, exc: Exception, *, api_key: str | None, deltas: int | None
) -> ModelConnectionError:
    """No response at all (`deltas` None), or a stream that broke after `deltas` deltas."""
    cause = f"{type(exc).__name__}: {_redact(str(exc), api_key)}"
    if deltas is None:
        return ModelConnectionError(f"{prefix}: no response ({cause})")
    return ModelConnectionError(
        f"{prefix}: the connection broke while the answer streamed in, {arrived(deltas)} ({cause})",
        deltas=deltas,
    )


def arrived(deltas: int) -> str:
    """How much of a streamed answer had reached the caller, for error messages."""
    if deltas == 0:
        return "before any delta had arrived"
    piece = "delta" if deltas == 1 else "deltas"
    return f"after {deltas} {piece} had reached the caller; that partial answer is lost"


def redact(text: str, api_key: str | None) -> str:
    """`text` with the API key replaced by `***`."""
    return _redact(text, api_key)


def _redact(text: str, api_key: str | None) -> str:
    return text.replace(api_key, "***") if api_key and len(api_key) >= 4 else text
