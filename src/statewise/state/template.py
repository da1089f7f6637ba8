"""TEMPORARY stand-in (replaced by the state branch's implementation on merge)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_REF = re.compile(r"\{\{|\}\}|\{((?:user:|app:|temp:)?[A-Za-z_][\w-]*(?:\.[\w-]+)*)(\?)?\}")


def render_template(template: str, state: Mapping[str, Any]) -> str:
    def sub(m: re.Match[str]) -> str:
        whole = m.group(0)
        if whole == "{{":
            return "{"
        if whole == "}}":
            return "}"
        parts = m.group(1).split(".")
        value: Any = state
        for part in parts:
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return "" if m.group(2) else whole
        return (
            value
            if isinstance(value, str)
            else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        )

    return _REF.sub(sub, template)
