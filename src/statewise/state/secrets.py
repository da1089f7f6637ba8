"""Encryption at rest for secret state keys, and redaction for logs, UI and exports.

Encrypted values are stored as a JSON marker `{"$secret": "<fernet token>"}`, so stored
state stays plain JSON and a reader can tell an encrypted value from a normal dict.

What a redacted value looks like, and how each kind of record is redacted, is written
here once (`REDACTED`, `Redaction`). Where it is applied is the boundary where data
leaves the engine: on the way in, the commit codec (`db/state_codec.py`) masks secret
values in what a commit stores and the event emitter in what a run streams; on the way
out, every read of the public session service (`statewise.Sessions`) returns data
already redacted by a `Redaction` built from the session's own data (its app's secret
registry), whoever asks. The HTTP server, the page and the command line redact nothing
themselves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statewise.exceptions import MissingDependencyError, SecretsError, StateConflictError

__all__ = [
    "MARKER",
    "REDACTED",
    "REGISTRY_KEY",
    "Cipher",
    "Redaction",
    "is_encrypted",
    "mask_json",
    "mask_text",
    "redact",
    "redact_conflict",
    "redact_conflict_error",
    "redact_op_value",
    "registered_secrets",
    "secret_values",
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


def redact_conflict_error(
    error: StateConflictError, secret_keys: Iterable[str]
) -> StateConflictError:
    """A `strict` conflict's error with both values shown as the marker when its key is
    secret (the error's text goes wherever errors go); the same error otherwise."""
    return error.masked(REDACTED) if error.key in frozenset(secret_keys) else error


def redact(state: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    """A shallow copy with the secret keys' values replaced by "***"."""
    secrets = frozenset(secret_keys)
    return {key: REDACTED if key in secrets else value for key, value in state.items()}


MIN_MASKED_CHARS = 4
"""Secret values shorter than this are not masked by value: "1" or "ok" would mask every
occurrence of a common text (CI systems draw the same line)."""


def secret_values(state: Mapping[str, Any], secret_keys: Iterable[str]) -> tuple[str, ...]:
    """The texts that give a secret away wherever they appear: every string in each
    secret key's value in `state` (the value itself, or the strings inside a list or
    object), longest first so a longer value is masked whole before a shorter one in it.
    Numbers, booleans and null are not masked by value: "true" or "1200" would mask
    ordinary text everywhere."""
    found: set[str] = set()
    for key in secret_keys:
        if key not in state or is_encrypted(state[key]):
            continue
        stack = [state[key]]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                found.add(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
    return tuple(sorted((v for v in found if len(v) >= MIN_MASKED_CHARS), key=len, reverse=True))


def mask_text(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of a secret value replaced by the marker."""
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def mask_json(data: Any, values: tuple[str, ...]) -> Any:
    """`data` (JSON: dicts, lists, scalars) with secret values masked in every string,
    keys included; the same object when nothing in it needed masking."""
    return _mask(data, values)[0] if values else data


def _mask(data: Any, values: tuple[str, ...]) -> tuple[Any, bool]:
    if isinstance(data, str):
        masked = mask_text(data, values)
        return masked, masked is not data
    if isinstance(data, dict):
        changed = False
        out = {}
        for key, value in data.items():
            new_key = mask_text(key, values) if isinstance(key, str) else key
            new_value, moved = _mask(value, values)
            changed = changed or moved or new_key is not key
            out[new_key] = new_value
        return (out, True) if changed else (data, False)
    if isinstance(data, list):
        pairs = [_mask(v, values) for v in data]
        if any(moved for _, moved in pairs):
            return [v for v, _ in pairs], True
        return data, False
    return data, False


_CHANGE_FIELDS = ("base", "theirs", "ours", "resolved", "before", "after")


@dataclass(frozen=True, slots=True)
class Redaction:
    """How one session's data is redacted on its way out of the engine: `keys` are the
    secret keys its data records (their values read as `REDACTED` in states, ops,
    conflicts and diffs), `values` the secret texts it holds now (masked wherever they
    appear in free JSON: answers, messages, tool arguments)."""

    keys: frozenset[str] = frozenset()
    values: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, state: Mapping[str, Any], keys: Iterable[str], *, by_value: bool = True
    ) -> Redaction:
        """The redaction of a (merged) state: its secret keys and, with `by_value`, the
        secret texts their values hold."""
        secrets = frozenset(keys)
        return cls(secrets, secret_values(state, secrets) if secrets and by_value else ())

    def __bool__(self) -> bool:
        return bool(self.keys or self.values)

    def state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """A state with each secret key's value shown as the marker."""
        return redact(state, self.keys) if self.keys else dict(state)

    def op(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """A stored op (path from the top-level key) with a secret or encrypted value hidden."""
        return redact_op_value(op, self.keys)

    def change(self, change: Mapping[str, Any]) -> dict[str, Any]:
        """A conflict record or a diff change with a secret key's values hidden."""
        return redact_conflict(change, self.keys)

    def delta(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        """A delta as a dict (`ops` and/or `segments`, `conflicts`) with secrets hidden."""
        out = dict(delta)
        if "ops" in out:
            out["ops"] = [self.op(op) for op in out["ops"]]
        if "segments" in out:
            out["segments"] = [
                {**seg, "ops": [self.op(op) for op in seg.get("ops", [])]}
                for seg in out["segments"]
            ]
        if "conflicts" in out:
            out["conflicts"] = [self.change(c) for c in out["conflicts"]]
        return out

    def json(self, data: Any) -> Any:
        """JSON data with the secret texts masked in every string (keys included)."""
        return mask_json(data, self.values)

    def export_line(self, line: Mapping[str, Any]) -> dict[str, Any]:
        """One export record: a delta of the session's own scope with its secret values
        hidden, any other record with the secret texts masked."""
        if line.get("type") == "delta" and line.get("scope") == "session":
            return self.delta(line)
        masked: dict[str, Any] = self.json(dict(line))
        return masked
