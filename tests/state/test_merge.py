from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statewise.exceptions import ConfigurationError, StateConflictError
from statewise.state.jsonvalue import copy_json
from statewise.state.merge import Conflict, Rules, rebase
from statewise.state.ops import MISSING, Op, apply_ops
from statewise.state.reducers import resolve_rule, union_reducer
from statewise.state.tracked import Recorder, track


def run_writer(base: dict[str, Any], fn: Any) -> list[Op]:
    recorder = Recorder()
    state = track(copy_json(base), recorder)
    fn(state)
    return recorder.drain()


def after(base: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    doc: dict[str, Any] = copy_json(base)
    apply_ops(doc, ops)
    return doc


def counter(state: Any) -> None:
    state["n"] = state.get("n", 0) + 1


def test_two_counters_with_sum_rule_both_count() -> None:
    base = {"n": 5}
    theirs, ours = run_writer(base, counter), run_writer(base, counter)
    latest = after(base, theirs)
    result = rebase(latest, theirs, ours, Rules({"n": "sum"}))
    assert latest == {"n": 7}
    assert result.ops == [Op(op="set", path=("n",), value=7)]
    assert [c.rule for c in result.conflicts] == ["sum"]


def test_sum_chains_over_several_of_our_writes() -> None:
    base: dict[str, Any] = {}
    theirs = run_writer(base, counter)

    def counter_twice(state: Any) -> None:
        counter(state)
        counter(state)

    ours = run_writer(base, counter_twice)
    latest = after(base, theirs)
    rebase(latest, theirs, ours, Rules({"n": "sum"}))
    assert latest == {"n": 3}


def test_last_write_wins_records_the_overwritten_value() -> None:
    base = {"theme": "light"}
    theirs = run_writer(base, lambda s: s.__setitem__("theme", "dark"))
    ours = run_writer(base, lambda s: s.__setitem__("theme", "blue"))
    latest = after(base, theirs)
    result = rebase(latest, theirs, ours, Rules())
    assert latest == {"theme": "blue"}
    assert result.conflicts == [
        Conflict(
            path=("theme",),
            base="light",
            theirs="dark",
            ours="blue",
            resolved="blue",
            rule="last_write_wins",
        )
    ]
    assert result.conflicts[0].to_json() == {
        "path": ["theme"],
        "rule": "last_write_wins",
        "base": "light",
        "theirs": "dark",
        "ours": "blue",
        "resolved": "blue",
    }


def test_equal_writes_from_one_base_are_recorded_conflicts_and_strict_raises() -> None:
    # Two `k += 1` from base 1 both write 2: keeping one loses an increment, so equal
    # values are a conflict too (recorded under last_write_wins, raised under strict).
    base = {"k": 1}
    theirs = run_writer(base, lambda s: s.__setitem__("k", 2))
    same = run_writer(base, lambda s: s.__setitem__("k", 2))
    latest = after(base, theirs)
    result = rebase(latest, theirs, same, Rules())
    assert [c.to_json() for c in result.conflicts] == [
        {
            "path": ["k"],
            "rule": "last_write_wins",
            "base": 1,
            "theirs": 2,
            "ours": 2,
            "resolved": 2,
        }
    ]
    with pytest.raises(StateConflictError):
        rebase(after(base, theirs), theirs, same, Rules({"k": "strict"}))
    with pytest.raises(StateConflictError):
        rebase(after(base, theirs), theirs, same, Rules(default="strict"))
    other = run_writer(base, lambda s: s.__setitem__("k", 3))
    with pytest.raises(StateConflictError, match="state\\['k'\\]"):
        rebase(after(base, theirs), theirs, other, Rules({"k": "strict"}))


def test_an_equal_write_is_recorded_but_not_written_again() -> None:
    """Two creators of one session set the same default state: the loser's rebase
    records the conflict and writes nothing, instead of storing the whole value again.
    A value equal only to Python (1, 1.0 and True) is written: its JSON differs."""
    big = {"items": [{"i": i} for i in range(1_000)]}
    theirs = run_writer({}, lambda s: s.__setitem__("doc", big))
    same = run_writer({}, lambda s: s.__setitem__("doc", copy_json(big)))
    latest = after({}, theirs)
    result = rebase(latest, theirs, same, Rules())
    assert result.ops == [] and latest == {"doc": big}
    assert [c.rule for c in result.conflicts] == ["last_write_wins"]
    for a, b in ((1, 1.0), (1, True), ([1], [1.0]), ({"x": 0}, {"x": False})):
        theirs = run_writer({}, lambda s, a=a: s.__setitem__("k", a))
        ours = run_writer({}, lambda s, b=b: s.__setitem__("k", b))
        latest = after({}, theirs)
        result = rebase(latest, theirs, ours, Rules())
        assert [op.value for op in result.ops] == [b], (a, b)
        assert repr(latest["k"]) == repr(b)


def test_descendant_and_ancestor_overlaps() -> None:
    base = {"user": {"name": "a", "age": 1}}
    theirs = run_writer(base, lambda s: s["user"].__setitem__("name", "b"))
    ours = run_writer(base, lambda s: s.__setitem__("user", {"name": "c"}))
    latest = after(base, theirs)
    result = rebase(latest, theirs, ours, Rules())
    assert latest == {"user": {"name": "c"}}
    assert result.conflicts[0].theirs == {"name": "b", "age": 1}


def test_op_that_no_longer_applies_is_recreated_under_lww() -> None:
    base = {"l": [1]}
    theirs = run_writer(base, lambda s: s.__setitem__("l", {"now": "dict"}))
    ours = run_writer(base, lambda s: s["l"].append(2))
    latest = after(base, theirs)
    result = rebase(latest, theirs, ours, Rules())
    assert latest == {"l": [2]}
    assert result.conflicts[0].theirs == {"now": "dict"}
    assert result.ops == [Op(op="set", path=("l",), value=[2])]


def test_union_and_custom_rules() -> None:
    base = {"tags": ["a"], "best": 1}
    theirs = run_writer(
        base, lambda s: (s.__setitem__("tags", ["a", "b"]), s.__setitem__("best", 9))
    )
    ours = run_writer(base, lambda s: (s.__setitem__("tags", ["a", "c"]), s.__setitem__("best", 4)))
    latest = after(base, theirs)
    rules = Rules({"tags": "union"}).merged({"best": lambda b, t, o: min(t, o)})
    rebase(latest, theirs, ours, rules)
    assert latest == {"tags": ["a", "b", "c"], "best": 4}
    assert union_reducer(MISSING, {"x": 1, "y": 1}, {"y": 2}) == {"x": 1, "y": 2}


def test_rules_lookup_and_errors() -> None:
    rules = Rules({"stats": "max", "stats.count": "sum"})
    assert rules.rule_for(("stats", "count", "x")) is resolve_rule("sum")
    assert rules.rule_for(("stats", "other")) is resolve_rule("max")
    assert rules.rule_for(("nope",)) == "last_write_wins"
    with pytest.raises(
        ConfigurationError, match="known rules: last_write_wins, max, min, strict, sum, union"
    ):
        Rules({"x": "average"})  # type: ignore[dict-item]


keys_a = st.sampled_from(["a1", "a2", "shared_counter"])
keys_b = st.sampled_from(["b1", "b2", "shared_counter"])


def writer(prefix: str, keys: Any) -> Any:
    action = st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3)),
        st.tuples(st.just("set"), keys.filter(lambda k: k != "shared_counter"), st.integers()),
        st.tuples(st.just("inc"), keys, st.integers(-5, 5)),
    )
    return st.lists(action, max_size=8).map(lambda acts: (prefix, acts))


def play(state: Any, plan: tuple[str, list[Any]]) -> None:
    prefix, actions = plan
    for i, act in enumerate(actions):
        if act[0] == "append":
            state.setdefault(f"list{act[1]}", []).append(f"{prefix}{i}")
        elif act[0] == "set":
            state[act[1]] = act[2]
        else:
            state.increment(act[1], act[2])


@settings(max_examples=200, deadline=None)
@given(a=writer("A", keys_a), b=writer("B", keys_b), base_counter=st.integers(-3, 3))
def test_rebasing_commuting_ops_equals_serial_execution(a: Any, b: Any, base_counter: int) -> None:
    base = {"shared_counter": base_counter, "list0": ["x"]}
    ops_a, ops_b = run_writer(base, lambda s: play(s, a)), run_writer(base, lambda s: play(s, b))
    latest = after(base, ops_a)
    result = rebase(latest, ops_a, ops_b, Rules())
    serial = track(copy_json(base), Recorder())
    play(serial, a)
    play(serial, b)
    assert latest == serial
    assert result.conflicts == []
    assert after(after(base, ops_a), result.ops) == serial


# ---- list positions: inserts and removes rebase onto where their element is now ----------


def _rebased(base: dict[str, Any], theirs_fn: Any, ours_fn: Any) -> dict[str, Any]:
    theirs = run_writer(base, theirs_fn)
    ours = run_writer(base, ours_fn)
    latest = after(base, theirs)
    rebase(latest, theirs, ours, Rules())
    return latest


def test_insert_racing_an_insert_at_the_same_index_goes_after_theirs() -> None:
    base = {"l": ["a", "b", "c"]}
    got = _rebased(base, lambda s: s["l"].insert(1, "T"), lambda s: s["l"].insert(1, "O"))
    assert got == {"l": ["a", "T", "O", "b", "c"]}


def test_insert_keeps_its_neighbour_when_theirs_inserted_or_removed_before_it() -> None:
    base = {"l": ["a", "b", "c"]}
    # Ours inserts before "c"; theirs inserted two items at the front.
    got = _rebased(
        base,
        lambda s: (s["l"].insert(0, "T1"), s["l"].insert(0, "T2")),
        lambda s: s["l"].insert(2, "O"),
    )
    assert got == {"l": ["T2", "T1", "a", "b", "O", "c"]}
    # Theirs removed "b", before our position.
    got = _rebased(base, lambda s: s["l"].remove("b"), lambda s: s["l"].insert(2, "O"))
    assert got == {"l": ["a", "O", "c"]}


def test_remove_with_duplicates_removes_the_element_it_meant() -> None:
    base = {"l": ["x", "y", "x"]}
    # Ours removes the last "x"; theirs put another "x" in front meanwhile.
    got = _rebased(base, lambda s: s["l"].insert(0, "x"), lambda s: s["l"].pop(2))
    assert got == {"l": ["x", "x", "y"]}
    # Ours removes the first "x"; theirs appended "z": the last "x" stays.
    got = _rebased(base, lambda s: s["l"].append("z"), lambda s: s["l"].remove("x"))
    assert got == {"l": ["y", "x", "z"]}


def test_both_removing_one_element_removes_it_once() -> None:
    base = {"l": ["x", "y", "x"]}
    got = _rebased(base, lambda s: s["l"].remove("x"), lambda s: s["l"].remove("x"))
    assert got == {"l": ["y", "x"]}


def test_a_write_into_a_list_element_follows_the_element() -> None:
    base = {"l": [{"n": 1}, {"n": 2}]}
    got = _rebased(
        base, lambda s: s["l"].insert(0, {"n": 0}), lambda s: s["l"][1].__setitem__("n", 20)
    )
    assert got == {"l": [{"n": 0}, {"n": 1}, {"n": 20}]}
