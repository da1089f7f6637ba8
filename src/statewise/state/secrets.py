"""TEMPORARY stand-in (replaced by the state branch's implementation on merge)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class Cipher:
    @classmethod
    def from_env(cls) -> Cipher:
        return cls()

    def encrypt_value(self, value: Any) -> dict[str, Any]:
        return {"$secret": value}

    def decrypt_value(self, marker: dict[str, Any]) -> Any:
        return marker["$secret"]


def is_encrypted(value: Any) -> bool:
    return isinstance(value, dict) and "$secret" in value


def redact(state: Mapping[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    keys = set(secret_keys)
    return {k: ("***" if k in keys else v) for k, v in state.items()}
