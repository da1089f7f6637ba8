"""JsonText writes what `json.dumps` writes, and refuses what it refuses, as ValueError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statewise.state.jsontext import JsonText


def test_the_text_is_json_dumps_text() -> None:
    value = {"a": [1, 2.5, None, True, "é\n"], "b": {"c": ""}, "d": 10**30}
    for options in ({}, {"ensure_ascii": False, "separators": (",", ":")}):
        assert JsonText(**options).dumps(value) == json.dumps(value, **options)  # type: ignore[arg-type]


def test_a_value_that_contains_itself_or_nests_too_deeply_is_a_value_error() -> None:
    encoder = JsonText()
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        encoder.dumps({"k": loop})
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        encoder.dumps(deep)
    assert encoder.dumps([1]) == "[1]"  # usable after a failure


def test_one_encoder_serves_every_thread_at_once() -> None:
    """The encoder is shared: threads encoding at the same time each get their own text."""
    import threading

    text = JsonText(ensure_ascii=False, separators=(",", ":"))
    values = [{"n": i, "items": list(range(i % 50)), "name": f"t{i}"} for i in range(400)]
    wrong: list[int] = []

    def work(offset: int) -> None:
        for _ in range(20):
            for i in range(offset, len(values), 4):
                if text.dumps(values[i]) != json.dumps(
                    values[i], ensure_ascii=False, separators=(",", ":")
                ):
                    wrong.append(i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
