"""JSON Patch from recorded ops: applying every patch to the snapshot gives the state."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statewise.exceptions import StateOpError
from statewise.state.edits import fill_missing, replay_edits, same_json
from statewise.state.jsonpatch import REDACTED, PatchMirror, pointer
from statewise.state.jsonvalue import copy_json
from statewise.state.ops import Op, apply_op
from statewise.state.tracked import Recorder, track


def patched(snapshot: dict[str, Any], patch: list[dict[str, Any]]) -> Any:
    """Apply with an independent RFC 6902 implementation (the `jsonpatch` package)."""
    return jsonpatch.apply_patch(snapshot, patch)


def test_append_is_add_dash_increment_is_replace_delete_is_remove() -> None:
    state = {"items": ["a"], "n": 1, "gone": True}
    mirror = PatchMirror(state)
    patch = mirror.apply(
        [
            Op(op="append", path=("items",), value="b"),
            Op(op="increment", path=("n",), value=2),
            Op(op="delete", path=("gone",)),
        ]
    )
    assert patch == [
        {"op": "add", "path": "/items/-", "value": "b"},
        {"op": "replace", "path": "/n", "value": 3},
        {"op": "remove", "path": "/gone"},
    ]
    assert patched(state, patch) == mirror.doc == {"items": ["a", "b"], "n": 3}


def test_created_containers_are_one_add_and_pointers_are_escaped() -> None:
    mirror = PatchMirror({})
    patch = mirror.apply(
        [
            Op(op="set", path=("a/b", "c~d", "e"), value=1),
            Op(op="append", path=("list",), value={"x": 1}),
            Op(op="increment", path=("count",), value=5),
            Op(op="set", path=("a/b", "c~d", "f"), value=2),
        ]
    )
    assert patch == [
        {"op": "add", "path": "/a~1b", "value": {"c~d": {"e": 1}}},
        {"op": "add", "path": "/list", "value": [{"x": 1}]},
        {"op": "add", "path": "/count", "value": 5},
        {"op": "add", "path": "/a~1b/c~0d/f", "value": 2},
    ]
    assert pointer(["a/b", "c~d", 0]) == "/a~1b/c~0d/0"


def test_list_remove_by_value_negative_indexes_and_noops() -> None:
    state = {"l": [1, 2, 3, 2], "d": {"k": 1}}
    mirror = PatchMirror(state)
    patch = mirror.apply(
        [
            Op(op="remove", path=("l",), value=2, index=3),  # index still holds the value
            Op(op="remove", path=("l",), value=9),  # absent: nothing
            Op(op="set", path=("l", -1), value=30),
            Op(op="delete", path=("l", -3)),
            Op(op="delete", path=("missing", "x")),
            Op(op="remove", path=("nolist",), value=1),
            Op(op="insert", path=("l",), value=0, index=-100),
        ]
    )
    assert patch == [
        {"op": "remove", "path": "/l/3"},
        {"op": "replace", "path": "/l/2", "value": 30},
        {"op": "remove", "path": "/l/0"},
        {"op": "add", "path": "/l/0", "value": 0},
    ]
    assert patched(state, patch) == mirror.doc == {"l": [0, 2, 30], "d": {"k": 1}}


def test_secret_keys_are_redacted_and_hidden_keys_left_out() -> None:
    state = {"token": "s3cret", "__ttl__": {"x": 1.0}, "temp:t": 1, "x": 1}
    mirror = PatchMirror(
        state,
        secret_keys={"token", "api"},
        hidden=lambda key: key == "__ttl__" or key.startswith("temp:"),
    )
    assert mirror.snapshot() == {"token": REDACTED, "x": 1}
    patch = mirror.apply(
        [
            Op(op="set", path=("token",), value="new-secret"),
            Op(op="set", path=("api",), value={"key": "other-secret"}),
            Op(op="set", path=("__ttl__", "x"), value=2.0),
            Op(op="set", path=("temp:t",), value=2),
            Op(op="delete", path=("token",)),
        ]
    )
    assert patch == [
        {"op": "add", "path": "/api", "value": REDACTED},
        {"op": "remove", "path": "/token"},
    ]
    assert "secret" not in str(patch)
    assert mirror.doc == {"api": REDACTED, "x": 1}


def test_an_op_that_does_not_fit_the_document_raises() -> None:
    mirror = PatchMirror({"n": "text"})
    with pytest.raises(StateOpError):
        mirror.apply([Op(op="increment", path=("n",), value=1)])


# ---- the property: snapshot + every patch == the state the ops produced ---------------------

keys = st.sampled_from(["a", "b", "c", "x/y", "t~"])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(-2, 2), st.text(max_size=3)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=6,
)
paths = st.lists(st.one_of(keys, st.integers(-3, 3)), min_size=0, max_size=2).flatmap(
    lambda rest: keys.map(lambda first: (first, *rest))
)
ops = st.builds(
    Op,
    op=st.sampled_from(["set", "delete", "append", "extend", "insert", "remove", "increment"]),
    path=paths,
    value=values,
    index=st.one_of(st.none(), st.integers(-4, 4)),
).map(
    lambda op: (
        Op(op=op.op, path=op.path, value=3, index=op.index)
        if op.op == "increment"
        else Op(op=op.op, path=op.path, value=[op.value], index=op.index)
        if op.op == "extend"
        else Op(op=op.op, path=op.path, value=op.value, index=op.index or 0)
        if op.op == "insert"
        else op
    )
)


@settings(max_examples=150, deadline=None)
@given(start=st.dictionaries(keys, values, max_size=4), candidates=st.lists(ops, max_size=12))
def test_applying_every_patch_to_the_snapshot_gives_the_state(
    start: dict[str, Any], candidates: list[Op]
) -> None:
    # Keep the ops that apply (the store only ever records ops that applied).
    state = copy_json(start)
    recorded: list[Op] = []
    for op in candidates:
        trial = copy_json(state)
        try:
            apply_op(trial, op)
        except StateOpError:
            continue
        state = trial
        recorded.append(op)
    mirror = PatchMirror(start)
    snapshot = mirror.snapshot()
    document = snapshot
    for op in recorded:  # one delta per commit point, applied one after another
        document = patched(document, mirror.apply([op]))
        assert same_json(document, mirror.doc)
    assert same_json(document, state)


@settings(max_examples=100, deadline=None)
@given(
    start=st.dictionaries(keys, values, max_size=4),
    candidates=st.lists(ops, max_size=8),
    secrets=st.sets(keys, max_size=2),
)
def test_redacted_patches_give_the_redacted_state(
    start: dict[str, Any], candidates: list[Op], secrets: set[str]
) -> None:
    state = copy_json(start)
    recorded: list[Op] = []
    for op in candidates:
        trial = copy_json(state)
        try:
            apply_op(trial, op)
        except StateOpError:
            continue
        state, recorded = trial, [*recorded, op]
    mirror = PatchMirror(start, secret_keys=secrets)
    assert mirror.snapshot() == _redact(start, secrets)
    patch = mirror.apply(recorded)
    expected = {k: REDACTED if k in secrets else v for k, v in state.items()}
    assert same_json(patched(_redact(start, secrets), patch), expected)
    for change in patch:
        if change["path"].split("/")[1] in {pointer([s])[1:] for s in secrets}:
            assert change.get("value", REDACTED) == REDACTED


def _redact(state: dict[str, Any], secrets: set[str]) -> dict[str, Any]:
    return {k: REDACTED if k in secrets else copy_json(v) for k, v in state.items()}


# ---- replaying a frontend's edits as ops ----------------------------------------------------


def replayed(base: dict[str, Any], edited: dict[str, Any]) -> tuple[dict[str, Any], list[Op]]:
    recorder = Recorder()
    target = track(copy_json(base), recorder)
    replay_edits(target, base, edited)
    return copy_json(target), recorder.drain()


def test_edits_become_small_ops() -> None:
    base = {"items": ["a", "b"], "prefs": {"theme": "dark", "size": 1}, "old": 1}
    edited = {"items": ["a", "b", "c"], "prefs": {"theme": "light", "size": 1}, "new": 2}
    result, recorded = replayed(base, edited)
    assert result == edited
    assert [(o.op, o.path, o.value) for o in recorded] == [
        ("delete", ("old",), None),
        ("append", ("items",), "c"),
        ("set", ("prefs", "theme"), "light"),
        ("set", ("new",), 2),
    ]


def test_list_edits_remove_and_insert_by_item() -> None:
    base = {"l": ["a", "b", "c", "d"]}
    result, recorded = replayed(base, {"l": ["x", "a", "c", "d", "e"]})
    assert result == {"l": ["x", "a", "c", "d", "e"]}
    assert [o.op for o in recorded] == ["append", "remove", "insert"]


@settings(max_examples=150, deadline=None)
@given(
    base=st.dictionaries(keys, values, max_size=4), edited=st.dictionaries(keys, values, max_size=4)
)
def test_replaying_edits_gives_the_edited_state(
    base: dict[str, Any], edited: dict[str, Any]
) -> None:
    result, recorded = replayed(base, edited)
    assert same_json(result, edited)
    doc = copy_json(base)
    for op in recorded:
        apply_op(doc, op)
    assert same_json(doc, edited)


def test_fill_missing_keeps_what_is_there() -> None:
    recorder = Recorder()
    target = track({"a": 1, "d": {"x": 1}}, recorder)
    fill_missing(target, {"a": 2, "b": 3, "d": {"x": 2, "y": 3}})
    assert copy_json(target) == {"a": 1, "b": 3, "d": {"x": 1, "y": 3}}
