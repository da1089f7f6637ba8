from typing import Any

import pytest

from statewise.exceptions import StateOpError
from statewise.state.ops import MISSING, Op, apply_op, apply_ops
from statewise.state.recorder import Recorder
from statewise.state.tracked import track


def run(doc: dict[str, Any], *ops: Op) -> dict[str, Any]:
    apply_ops(doc, ops)
    return doc


def test_missing_sentinel() -> None:
    assert not MISSING
    assert repr(MISSING) == "MISSING"


def test_op_json_round_trip() -> None:
    op = Op(op="insert", path=("a", 0), value={"x": 1}, index=2, prior=5)
    data = op.to_json()
    assert data == {"op": "insert", "path": ["a", 0], "value": {"x": 1}, "index": 2}
    assert Op.from_json(data) == op
    assert Op(op="set", path=("a",), value=1).to_json() == {
        "op": "set",
        "path": ["a"],
        "value": 1,
    }


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be a JSON object"),
        ({"op": "frob", "path": ["a"]}, "unknown op 'frob'"),
        ({"op": "set", "path": []}, "non-empty list"),
        ({"op": "set", "path": [0]}, "start with a str key"),
        ({"op": "set", "path": ["a", 1.5]}, "str or int"),
        ({"op": "insert", "path": ["a"], "value": 1}, "needs an index"),
        ({"op": "set", "path": ["a"], "index": "1"}, "index must be an int"),
        ({"op": "set", "path": ["a"], "extra": 1}, "unknown op fields"),
    ],
)
def test_from_json_rejects_bad_shapes(data: Any, fragment: str) -> None:
    with pytest.raises(StateOpError, match=fragment):
        Op.from_json(data)


def test_set_creates_intermediate_dicts_and_copies() -> None:
    value = {"theme": ["dark"]}
    op = Op(op="set", path=("user", "prefs"), value=value)
    doc = run({}, op)
    assert doc == {"user": {"prefs": {"theme": ["dark"]}}}
    doc["user"]["prefs"]["theme"].append("x")
    assert op.value == {"theme": ["dark"]}


def test_set_list_index() -> None:
    assert run({"a": [1, 2]}, Op(op="set", path=("a", 1), value=9)) == {"a": [1, 9]}
    with pytest.raises(StateOpError, match="index out of range"):
        run({"a": [1, 2]}, Op(op="set", path=("a", 5), value=9))


def test_delete() -> None:
    assert run({"a": 1, "b": 2}, Op(op="delete", path=("a",))) == {"b": 2}
    assert run({"b": 2}, Op(op="delete", path=("a", "x"))) == {"b": 2}
    assert run({"a": [1, 2, 3]}, Op(op="delete", path=("a", 1))) == {"a": [1, 3]}
    assert run({"a": [1]}, Op(op="delete", path=("a", 4))) == {"a": [1]}


def test_append_extend_insert() -> None:
    doc = run(
        {},
        Op(op="append", path=("l",), value=1),
        Op(op="extend", path=("l",), value=[2, 3]),
        Op(op="insert", path=("l",), value=0, index=0),
        Op(op="append", path=("n", "deep"), value="x"),
    )
    assert doc == {"l": [0, 1, 2, 3], "n": {"deep": ["x"]}}


def test_append_to_dict_is_an_error() -> None:
    with pytest.raises(
        StateOpError, match=r"cannot append to state\['x'\]: it is a dict, not a list"
    ):
        run({"x": {}}, Op(op="append", path=("x",), value=1))


def test_set_under_scalar_is_an_error() -> None:
    with pytest.raises(StateOpError, match=r"state\['x'\] is a int, not a container"):
        run({"x": 1}, Op(op="set", path=("x", "y"), value=1))


def test_remove_is_idempotent_and_prefers_index() -> None:
    doc = {"l": ["a", "b", "a"]}
    run(doc, Op(op="remove", path=("l",), value="a", index=2))
    assert doc == {"l": ["a", "b"]}
    run(doc, Op(op="remove", path=("l",), value="a", index=2))  # index stale: first match
    assert doc == {"l": ["b"]}
    run(doc, Op(op="remove", path=("l",), value="a", index=0))
    assert doc == {"l": ["b"]}
    run(doc, Op(op="remove", path=("missing",), value="a"))
    assert doc == {"l": ["b"]}


def test_increment() -> None:
    doc = run(
        {"n": 1},
        Op(op="increment", path=("n",), value=2),
        Op(op="increment", path=("m",), value=1.5),
    )
    assert doc == {"n": 3, "m": 1.5}
    with pytest.raises(StateOpError, match="not a number"):
        run({"n": "x"}, Op(op="increment", path=("n",), value=1))
    with pytest.raises(StateOpError, match="not a number"):
        run({"n": True}, Op(op="increment", path=("n",), value=1))
    with pytest.raises(StateOpError, match="by a str"):
        run({"n": 1}, Op(op="increment", path=("n",), value="1"))


def test_an_increment_applied_to_a_tracked_tree_is_recorded_as_an_increment() -> None:
    """Replayed onto a live state (a workflow's parallel branches merged), an increment
    must stay an increment, not become a `set` of the sum: only then does it keep merging
    with what other writers add meanwhile."""
    recorder = Recorder()
    root = track({"stats": {"n": 1}}, recorder)
    apply_ops(
        root,
        [
            Op(op="increment", path=("stats", "n"), value=2),
            Op(op="increment", path=("m",), value=1),
        ],
    )
    assert root == {"stats": {"n": 3}, "m": 1}
    assert [(op.op, op.path, op.value) for op in recorder.ops] == [
        ("increment", ("stats", "n"), 2),
        ("increment", ("m",), 1),
    ]
    with pytest.raises(StateOpError, match="not a number"):
        apply_op(track({"n": "x"}, Recorder()), Op(op="increment", path=("n",), value=1))


def test_apply_op_never_aliases_values() -> None:
    op = Op(op="append", path=("l",), value={"k": [1]})
    doc: dict[str, Any] = {}
    apply_op(doc, op)
    apply_op(doc, op)
    doc["l"][0]["k"].append(2)
    assert doc["l"][1] == {"k": [1]}
    assert op.value == {"k": [1]}
