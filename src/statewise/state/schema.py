"""TEMPORARY stand-in (replaced by the state branch's implementation on merge)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class Reducer:
    def __init__(self, rule: Any) -> None:
        self.rule = rule


class Secret:
    pass


class StateSchema:
    @classmethod
    def from_type(cls, tp: type) -> StateSchema:
        return cls()

    def defaults(self) -> dict[str, Any]:
        return {}

    def validate_keys(self, state: Mapping[str, Any], keys: Iterable[str]) -> None:
        return None

    def rules(self) -> dict[str, Any]:
        return {}

    def secret_keys(self) -> frozenset[str]:
        return frozenset()
