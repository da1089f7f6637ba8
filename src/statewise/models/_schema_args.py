"""Generate arguments that satisfy a tool's JSON schema, for `TestModel`.

Deterministic and minimal: defaults and `const`/`enum` values are used as given, required
properties are always present, optional ones are filled in too (with their default when
they have one), `$ref`s into `$defs`/`definitions` are followed, and numeric and length
bounds are respected. Not covered: `pattern`, `not`, `if/then/else`, `uniqueItems` with
`minItems` > 1 (items would repeat).
"""

from __future__ import annotations

from typing import Any

_STRING_FORMATS = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com",
    "url": "https://example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
}


def generate_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON object that validates against `schema` (an object schema)."""
    value = _Generator(schema).value(schema, depth=0)
    return value if isinstance(value, dict) else {}


class _Generator:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def value(self, schema: dict[str, Any], depth: int) -> Any:
        schema = self.resolve(schema)
        if "default" in schema:
            return schema["default"]
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                options = [self.resolve(s) for s in schema[key]]
                non_null = [s for s in options if s.get("type") != "null"]
                return self.value((non_null or options)[0], depth)
        if schema.get("allOf"):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(self.resolve(part))
            return self.value(merged, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        return self.of_type(kind, schema, depth)

    def of_type(self, kind: str | None, schema: dict[str, Any], depth: int) -> Any:
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return int(self.number(schema, step=1))
        if kind == "number":
            return float(self.number(schema, step=0.5))
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        return self.string(schema)

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        result: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required or depth < 3:  # optional ones only near the top: no cycles
                result[name] = self.value(sub, depth + 1)
        return result

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = [self.value(sub, depth + 1) for sub in prefix]
        item_schema = schema.get("items")
        count = max(int(schema.get("minItems", 1)), len(items))
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        while len(items) < count and isinstance(item_schema, dict):
            items.append(self.value(item_schema, depth + 1))
        return items[:count]

    def number(self, schema: dict[str, Any], step: float) -> float:
        low = schema.get("minimum")
        if "exclusiveMinimum" in schema:
            low = schema["exclusiveMinimum"] + step
        high = schema.get("maximum")
        if "exclusiveMaximum" in schema:
            high = schema["exclusiveMaximum"] - step
        if low is not None:
            return float(low)
        if high is not None and high < 0:
            return float(high)
        return 0.0

    def string(self, schema: dict[str, Any]) -> str:
        text = _STRING_FORMATS.get(schema.get("format", ""), "a")
        text = text.ljust(int(schema.get("minLength", 0)), "a")
        if "maxLength" in schema:
            text = text[: int(schema["maxLength"])]
        return text

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Follow local `$ref`s (`#/$defs/X`, `#/definitions/X`), keeping sibling keys."""
        seen = 0
        while "$ref" in schema and seen < 32:
            ref = schema["$ref"]
            target: Any = self.root
            for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else []:
                target = target.get(part, {}) if isinstance(target, dict) else {}
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**(target if isinstance(target, dict) else {}), **siblings}
            seen += 1
        return schema
