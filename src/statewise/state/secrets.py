"""Encryption at rest for secret state keys, and redaction for logs, UI and exports.

Encrypted values are stored as a JSON marker `{"$secret": "<fernet token>"}`, so stored
state stays plain JSON and a reader can tell an encrypted value from a normal dict.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from statewise.exceptions import MissingDependencyError, SecretsError

__all__ = [
    "MARKER",
    "REDACTED",
    "REGISTRY_KEY",
    "Cipher",
    "is_encrypted",
    "redact",
    "redact_conflict",
    "redact_op_value",
    "registered_secrets",
]

MARKER = "$secret"
REDACTED = "***"
"""What a secret value reads as wherever it leaves the engine: the one marker."""
REGISTRY_KEY = "app:__secrets__"
"""Which keys are secret is part of the data: the app scope (loaded with every session of
the app) lists, under this reserved key, the full names of every key any agent of the app
declared secret. Every agent on the database reads it, so one that declares nothing still
encrypts those keys, and none encrypts a value twice."""
_HOW_TO = (
    'create one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)


def is_encrypted(value: Any) -> bool:
    """True for an `encrypt_value` marker."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(MARKER), str)


class Cipher:
    """Fernet (AES-128-CBC + HMAC) over JSON values; tampering or a wrong key is detected."""

    def __init__(self, key: str | bytes) -> None:
        try:
            from cryptography.fernet import Fernet
        except ImportError:  # pragma: no cover - cryptography is installed in dev
            raise MissingDependencyError("cryptography", "secrets") from None
        try:
            self._fernet = Fernet(key.encode() if isinstance(key, str) else key)
        except (ValueError, TypeError) as error:
            raise SecretsError(f"invalid encryption key ({error}); {_HOW_TO}") from None

    @classmethod
    def from_env(cls, var: str = "STATEWISE_ENCRYPTION_KEY") -> Cipher:
        key = os.environ.get(var)
        if not key:
            raise SecretsError(f"secret state keys need an encryption key in ${var}; {_HOW_TO}")
        return cls(key)

    def encrypt_value(self, value: Any) -> dict[str, str]:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        return {MARKER: self._fernet.encrypt(data).decode()}

    def decrypt_value(self, marker: Any) -> Any:
        from cryptography.fernet import InvalidToken

        if not is_encrypted(marker):
            raise SecretsError("not an encrypted secret value")
        try:
            data = self._fernet.decrypt(marker[MARKER].encode())
        except InvalidToken:
            raise SecretsError(
                "cannot decrypt a secret state value: wrong STATEWISE_ENCRYPTION_KEY "
                "or corrupted data"
            ) from None
        return json.loads(data)


def registered_secrets(state: Mapping[str, Any]) -> frozenset[str]:
    """The secret key names recorded in a (merged) state's registry."""
    if REGISTRY_KEY not in state:  # (no registry: the common case, asked at every commit)
        return frozenset()
    names = state.get(REGISTRY_KEY)
    if not isinstance(names, list):
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str))


def redact_op_value(op: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    """An op (path from the top-level key) with a secret's value, or any encrypted value,
    shown as "***"."""
    path = op.get("path") or [None]
    value = op.get("value")
    if "value" in op and (path[0] in frozenset(secret_keys) or is_encrypted(value)):
        return {**op, "value": REDACTED}
    return dict(op)


def redact_conflict(conflict: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    """A conflict record with a secret key's values (base/theirs/ours/resolved) hidden."""
    path = conflict.get("path") or [None]
    if path[0] in frozenset(secret_keys):
        return {
            k: (REDACTED if k in ("base", "theirs", "ours", "resolved", "before", "after") else v)
            for k, v in conflict.items()
        }
    return dict(conflict)


def redact(state: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    """A shallow copy with the secret keys' values replaced by "***"."""
    secrets = frozenset(secret_keys)
    return {key: REDACTED if key in secrets else value for key, value in state.items()}
