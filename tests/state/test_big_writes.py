"""Big writes: the walk that converts a written value checks the common scalars inline,
and a snapshot is encoded from the tree's own plain values (no deep copy first). The
checks and the stored text must stay exactly what they were."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest

from statewise.db import _codec
from statewise.db.records import ScopeKey
from statewise.db.state_codec import StateCodec
from statewise.exceptions import StateSerializationError
from statewise.state._tracked_base import Node
from statewise.state.jsonvalue import MAX_INT, to_json_value
from statewise.state.recorder import Recorder
from statewise.state.tracked import shared_plain, to_plain, track


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def items(n: int) -> list[dict[str, Any]]:
    tags = ["a", "b"]  # one list shared by every item, as `dict(item, ...)` makes them
    return [{"sku": f"SKU-{i:06d}", "qty": i, "tags": tags} for i in range(n)]


def test_list_items_are_copied_and_converted() -> None:
    value = ["é", 1, True, None, 2.5, (1, 2), Color.RED, Level.HIGH, {"k": "v"}, [1]]
    out = to_json_value(value, ("x",))
    assert out == ["é", 1, True, None, 2.5, [1, 2], "red", 3, {"k": "v"}, [1]]
    assert out is not value
    assert [type(v) for v in out[5:8]] == [list, str, int]
    assert out[8] is not value[8] and out[9] is not value[9]


def test_shared_containers_come_out_unshared() -> None:
    out = to_json_value(items(3), ("items",))
    assert out[0]["tags"] is not out[1]["tags"]
    out[0]["tags"].append("c")
    assert out[1]["tags"] == ["a", "b"]


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("ok \ud800", "lone surrogate"),
        (MAX_INT + 1, "too large"),
        (-MAX_INT - 2, "too large"),
        (math.nan, "float nan is not valid JSON"),
        ({1, 2}, "'set' is not JSON-serializable"),
        (b"x", "'bytes' is not JSON-serializable"),
    ],
)
@pytest.mark.parametrize("where", ["list", "dict"])
def test_each_rejection_names_the_path(bad: Any, fragment: str, where: str) -> None:
    value: Any = items(70)
    if where == "list":
        value[65]["tags"] = ["a", bad]
        at = "state['items'][65]['tags'][1]: "
    else:
        value[65] = {**value[65], "odd": bad}
        at = "state['items'][65]['odd']: "
    with pytest.raises(StateSerializationError) as info:
        to_json_value(value, ("items",))
    assert str(info.value).startswith(at)
    assert fragment in str(info.value)


def test_a_failed_write_changes_nothing() -> None:
    root = track({"items": []}, Recorder())
    bad = items(70)
    bad[69] = {"sku": math.inf}
    with pytest.raises(StateSerializationError, match=r"state\['items'\]\[69\]\['sku'\]"):
        root["items"] = bad
    assert root == {"items": []}


def test_shared_plain_shares_plain_values_and_copies_tracked_ones() -> None:
    root = track({"items": items(5), "n": 1}, Recorder())
    first = root["items"][0]  # wrapped: a tracked dict inside a tracked list
    first["qty"] = 7
    view = shared_plain(root)
    assert view == to_plain(root)
    assert type(view) is dict and type(view["items"]) is list and type(view["items"][0]) is dict
    assert not isinstance(view["items"][0], Node)
    assert view["items"][0] is not first
    assert view["items"][1] is list.__getitem__(dict.__getitem__(root, "items"), 1)


def test_snapshot_text_is_unchanged_and_sees_later_writes() -> None:
    """The stored snapshot is byte for byte what encoding a deep plain copy gave, and a
    write after a big set shows in it while the set's recorded value stays as written."""
    recorder = Recorder()
    root = track({"items": [], "user:name": "ann"}, recorder)
    big = items(200)
    root["items"] = big
    root["items"][3]["qty"] = -1
    root["items"][4]["tags"].append("c")
    codec = StateCodec()
    key = ScopeKey("session", "s1")
    snapshot = codec.encode_snapshot(root, key, frozenset())
    expected = {"items": to_plain(root["items"])}
    assert _codec.dumps(snapshot) == _codec.dumps(expected)
    assert json.loads(_codec.dumps(snapshot))["items"][3]["qty"] == -1
    assert json.loads(_codec.dumps(snapshot))["items"][4]["tags"] == ["a", "b", "c"]
    set_op = next(op for op in recorder.ops if op.op == "set" and op.path == ("items",))
    assert set_op.value[3]["qty"] == 3 and set_op.value[4]["tags"] == ["a", "b"]
    assert big[3]["qty"] == 3 and big[4]["tags"] == ["a", "b"]
