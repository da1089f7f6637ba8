import copy
import json
import pickle
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statewise.exceptions import StateOpError, StateSerializationError
from statewise.state.jsonvalue import copy_json
from statewise.state.ops import MISSING, Op, apply_ops
from statewise.state.tracked import Recorder, TrackedDict, TrackedList, to_plain, track


def make(data: dict[str, Any]) -> tuple[TrackedDict, Recorder, dict[str, Any]]:
    start = copy_json(data)
    recorder = Recorder()
    return track(copy_json(data), recorder), recorder, start


def replayed(start: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    doc: dict[str, Any] = copy_json(start)
    apply_ops(doc, ops)
    return doc


def test_behaves_like_a_dict() -> None:
    state, _, _ = make({"shopping_list": ["milk"], "user": {"prefs": {"theme": "x"}}})
    assert isinstance(state, dict)
    assert isinstance(state["shopping_list"], list)
    assert json.dumps(state) == '{"shopping_list": ["milk"], "user": {"prefs": {"theme": "x"}}}'
    assert f"{state['shopping_list']}" == "['milk']"
    assert state == {"shopping_list": ["milk"], "user": {"prefs": {"theme": "x"}}}
    assert state.get("customer_profiles", {}).get("c1") is None
    assert repr(state) == str(dict(state))
    assert copy.deepcopy(state) == state
    assert type(copy.deepcopy(state)) is dict
    assert type(copy.deepcopy(state)["user"]) is dict
    assert pickle.loads(pickle.dumps(state)) == state


def test_each_mutator_records_its_op() -> None:
    state, rec, _ = make({"l": [1, 2, 3], "d": {"k": 1}, "n": 5})
    state["shopping_list"] = ["milk"]
    state["shopping_list"].append("eggs")
    state["l"].extend([4])
    state["l"].insert(0, 0)
    state["l"].remove(2)
    state["l"].pop()
    del state["d"]["k"]
    state.increment("n", 2)
    state["l"][0] = 9
    state["l"].sort()
    assert rec.drain() == [
        Op(op="set", path=("shopping_list",), value=["milk"]),
        Op(op="append", path=("shopping_list",), value="eggs"),
        Op(op="extend", path=("l",), value=[4]),
        Op(op="insert", path=("l",), value=0, index=0),
        Op(op="remove", path=("l",), value=2, index=2),
        Op(op="remove", path=("l",), value=4, index=3),
        Op(op="delete", path=("d", "k")),
        Op(op="increment", path=("n",), value=2),
        Op(op="set", path=("l", 0), value=9),
        Op(op="set", path=("l",), value=[1, 3, 9]),
    ]
    assert rec.ops == []


def test_prior_is_recorded_for_set_delete_increment() -> None:
    state, rec, _ = make({"a": {"b": [1]}, "n": 1})
    state["a"]["b"].append(2)
    state["a"] = "x"
    del state["a"]
    state.increment("n")
    state.increment("m")
    priors = [op.prior for op in rec.ops]
    assert priors == [MISSING, {"b": [1, 2]}, "x", 1, MISSING]


def test_nested_write_paths_and_replay() -> None:
    state, rec, start = make({"user": {"prefs": {"theme": "light"}}, "items": [{"q": 1}]})
    state["user"]["prefs"]["theme"] = "dark"
    state["items"][0]["q"] += 1
    state["items"][-1]["r"] = True
    assert [op.path for op in rec.ops] == [
        ("user", "prefs", "theme"),
        ("items", 0, "q"),
        ("items", 0, "r"),
    ]
    assert replayed(start, rec.ops) == state


def test_non_json_write_raises_and_changes_nothing() -> None:
    state, rec, _ = make({"user": {"prefs": [1, 2]}})
    with pytest.raises(StateSerializationError, match=r"state\['user'\]\['prefs'\]\[2\]: .*'set'"):
        state["user"]["prefs"].append({1})
    with pytest.raises(StateSerializationError, match=r"state\['x'\]\['k'\]"):
        state.update(ok=1, x={"k": object()})
    with pytest.raises(StateSerializationError, match="key 1"):
        state[1] = "x"  # type: ignore[index]
    assert state == {"user": {"prefs": [1, 2]}}
    assert rec.ops == []


def test_writes_copy_so_nothing_aliases() -> None:
    state, rec, start = make({"b": {"x": [1]}})
    state["a"] = state["b"]
    state["a"]["x"].append(2)
    assert state["b"] == {"x": [1]}
    mine = {"k": [1]}
    state["c"] = mine
    mine["k"].append(99)
    state["c"]["k"].append(2)
    assert mine == {"k": [1, 99]}
    assert rec.ops[0].value == {"x": [1]}  # recorded values are not mutated later
    assert replayed(start, rec.ops) == state


def test_lazy_wrapping_does_not_copy_untouched_subtrees() -> None:
    big = list(range(100_000))
    data = {"big": big, "small": {"x": 1}}
    state = track(data, Recorder())
    state["small"]["x"] = 2
    state["other"] = 1
    json.dumps({k: state[k] for k in state if k != "big"})
    assert dict.__getitem__(state, "big") is big
    assert "big" in state and len(state) == 3


def test_rollback_restores_exactly() -> None:
    state, rec, start = make({"l": [{"a": 1}, {"b": 2}], "d": {"x": {"y": 1}}, "k": 1})
    held = state["l"][1]
    sp = rec.savepoint()
    state["l"].insert(0, "new")
    state["l"][2]["b"] = 3
    state["d"]["x"]["y"] = 2
    state["d"] = {}
    state["l"].reverse()
    state["l"].pop(0)
    del state["k"]
    state.clear()
    state["z"] = 1
    rec.rollback(sp)
    assert state == start
    assert json.dumps(state) == json.dumps(start)  # key and list order too
    assert rec.ops == []
    held["b"] = 5  # re-attached: records again, at its old path
    assert rec.ops == [Op(op="set", path=("l", 1, "b"), value=5)]


def test_rollback_keeps_earlier_ops_and_rejects_stale_savepoints() -> None:
    state, rec, _ = make({})
    state["a"] = 1
    sp = rec.savepoint()
    state["b"] = 2
    rec.rollback(sp)
    assert state == {"a": 1}
    assert rec.ops == [Op(op="set", path=("a",), value=1)]
    rec.drain()
    with pytest.raises(StateOpError, match="savepoint"):
        rec.rollback(sp - 1)


def test_detached_containers_record_nothing() -> None:
    state, rec, _ = make({"a": {"x": 1}, "l": [[1], [2]]})
    old = state["a"]
    state["a"] = {"x": 2}
    popped = state["l"].pop(0)
    rec.drain()
    old["x"] = 99
    popped.append(5)
    assert rec.ops == []
    assert state == {"a": {"x": 2}, "l": [[2]]}


def test_list_renumbering_after_insert_and_delete() -> None:
    state, rec, start = make({"l": [{"i": 0}, {"i": 1}, {"i": 2}]})
    second, third = state["l"][1], state["l"][2]
    state["l"].insert(0, {"i": -1})
    third["seen"] = True
    del state["l"][0]
    del state["l"][0]
    second["seen"] = True
    assert [op.path for op in rec.ops if op.op == "set"] == [("l", 3, "seen"), ("l", 0, "seen")]
    assert (
        replayed(start, rec.ops) == state == {"l": [{"i": 1, "seen": True}, {"i": 2, "seen": True}]}
    )


def test_seed_002_methods() -> None:
    state, rec, start = make({"user": {"name": "Alice"}})
    state.set("count", 1)
    assert state.has("count") and not state.has("nope")
    assert state.increment("count") == 2
    state.update("user", {"login_count": 1})
    state.delete("missing")
    state.delete("count")
    all_ = state.get_all()
    all_["user"]["name"] = "Bob"
    assert state == {"user": {"name": "Alice", "login_count": 1}}
    assert type(all_["user"]) is dict
    assert replayed(start, rec.ops) == state
    with pytest.raises(StateOpError, match="not a number"):
        state.update(s="x")
        state.increment("s")


def test_dict_mutators_replay() -> None:
    state, rec, start = make({"a": 1, "b": {"c": 2}})
    state.update({"x": 1}, y=2)
    state |= {"z": 3}
    assert state.setdefault("b", {}) == {"c": 2}
    state.setdefault("new", []).append(1)
    assert state.pop("a") == 1
    assert state.pop("nope", "d") == "d"
    assert state.popitem() == ("new", [1])
    state["b"].clear()
    merged = state | {"q": 1}
    assert type(merged) is dict and merged["q"] == 1 and "q" not in state
    assert replayed(start, rec.ops) == state


def test_list_mutators_replay() -> None:
    state, rec, start = make({"l": [3, 1, 2, {"k": [1]}]})
    lst = state["l"]
    lst[3]["k"].append(2)
    lst += [5]
    lst[1:3] = [7, 8, 9]
    del lst[0:1]
    lst *= 2
    lst.remove(9)
    lst[-1] = 0
    assert lst[:2] == [7, 8]
    assert lst + [1] == [*lst, 1]  # noqa: RUF005 (testing __add__)
    assert isinstance(lst, TrackedList)
    assert replayed(start, rec.ops) == state
    lst.clear()
    assert replayed(start, rec.ops) == state == {"l": []}


def test_replace_contents_and_set_recorder_are_root_only() -> None:
    state, rec, _ = make({"a": {"x": 1}})
    child = state["a"]
    state.replace_contents({"b": 2})
    assert state == {"b": 2} and rec.ops == []
    child["x"] = 2
    assert rec.ops == []
    other = Recorder()
    state.set_recorder(other)
    state["c"] = 1
    assert other.ops == [Op(op="set", path=("c",), value=1)] and rec.ops == []
    with pytest.raises(StateOpError, match="root"):
        state["b"] = {}
        state["b"].replace_contents({})


def test_replace_contents_records_writes_to_the_children_it_puts_back() -> None:
    """A reload keeps the scopes that did not move: their tracked children go back into
    the root, and what is written to them later is recorded like any write."""
    state, rec, _ = make({"items": ["a"], "user:n": 1})
    state["items"].append("b")  # wraps the list
    kept = {k: v for k, v in dict.items(state) if not k.startswith("user:")}
    state.replace_contents({**kept, "user:n": 2})
    rec.ops.clear()
    state["items"].append("c")
    state["items"][0] = "z"
    assert rec.ops == [
        Op(op="append", path=("items",), value="c"),
        Op(op="set", path=("items", 0), value="z"),
    ]
    assert state == {"items": ["z", "b", "c"], "user:n": 2}


def test_to_plain() -> None:
    state, _, _ = make({"a": {"b": [1]}})
    plain = to_plain(state)
    assert type(plain) is dict and type(plain["a"]["b"]) is list and plain == state


# --- property: random mutation sequences replay to the same document -------------------

keys = st.sampled_from(["a", "b", "c", "d"])
scalars = st.one_of(st.integers(-5, 5), st.text(max_size=2), st.none(), st.booleans())
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keys, kids, max_size=3),
    max_leaves=6,
)


def containers(node: Any) -> list[Any]:
    found = [node]
    children = node.values() if isinstance(node, dict) else node
    for child in children:
        if isinstance(child, dict | list):
            found.extend(containers(child))
    return found


def mutate(data: st.DataObject, target: Any) -> None:
    if isinstance(target, dict):
        action = data.draw(
            st.sampled_from(["set", "del", "pop", "update", "inc", "clear", "setdefault"])
        )
        key = data.draw(keys)
        if action == "set":
            target[key] = data.draw(values)
        elif action == "del" and key in target:
            del target[key]
        elif action == "pop":
            target.pop(key, None)
        elif action == "update":
            target.update({key: data.draw(values)})
        elif (
            action == "inc"
            and isinstance(target.get(key, 0), int)
            and not isinstance(target.get(key), bool)
        ):
            cast(TrackedDict, target).increment(key, data.draw(st.integers(-3, 3)))
        elif action == "clear" and data.draw(st.integers(0, 5)) == 0:
            target.clear()
        elif action == "setdefault":
            target.setdefault(key, data.draw(values))
        return
    n = len(target)
    action = data.draw(
        st.sampled_from(
            [
                "append",
                "extend",
                "insert",
                "remove",
                "pop",
                "set",
                "del",
                "sort",
                "reverse",
                "slice",
            ]
        )
    )
    if action == "append":
        target.append(data.draw(values))
    elif action == "extend":
        target.extend(data.draw(st.lists(values, max_size=2)))
    elif action == "insert":
        target.insert(data.draw(st.integers(-n - 1, n + 1)), data.draw(values))
    elif n and action == "remove":
        target.remove(target[data.draw(st.integers(0, n - 1))])
    elif n and action == "pop":
        target.pop(data.draw(st.integers(-n, n - 1)))
    elif n and action == "set":
        target[data.draw(st.integers(-n, n - 1))] = data.draw(values)
    elif n and action == "del":
        del target[data.draw(st.integers(-n, n - 1))]
    elif action == "sort" and all(type(x) is int for x in target):
        target.sort()
    elif action == "reverse":
        target.reverse()
    elif action == "slice":
        target[0:1] = data.draw(st.lists(values, max_size=2))


@settings(max_examples=300, deadline=None)
@given(start=st.dictionaries(keys, values, max_size=4), data=st.data())
def test_random_mutations_replay_and_roll_back(start: dict[str, Any], data: st.DataObject) -> None:
    state, rec, original = make(start)
    sp = rec.savepoint()
    held = containers(state)
    for _ in range(data.draw(st.integers(1, 12))):
        live = containers(state)
        mutate(data, data.draw(st.sampled_from(live)))
        # mutating a container that may have been detached must never touch state
        if data.draw(st.booleans()):
            stale = data.draw(st.sampled_from(held))
            before, ops_before = copy_json(state), len(rec.ops)
            if not any(stale is c for c in containers(state)):
                mutate(data, stale)
                assert state == before and len(rec.ops) == ops_before
    assert replayed(original, rec.ops) == state
    for op in rec.ops:
        assert Op.from_json(json.loads(json.dumps(op.to_json()))) == op
    rec.rollback(sp)
    assert state == original
    assert rec.ops == []
