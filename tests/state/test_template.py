import pytest

from statewise.state.template import render_template, template_references
from statewise.state.tracked import Recorder, track

STATE = {
    "name": "Ann",
    "user": {"prefs": {"theme": "dark"}, "n": 3},
    "items": ["a", {"b": 1}],
    "user:name": "Bo",
    "app:cfg": {"v": 1},
    "flag": True,
    "none": None,
    "uni": "é",
}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Hi {name}!", "Hi Ann!"),
        ("{user.prefs.theme}", "dark"),
        ("{user.prefs}", '{"theme":"dark"}'),
        ("{items.0} {items.1.b} {items.1}", 'a 1 {"b":1}'),
        ("{user:name}", "Bo"),
        ("{app:cfg.v}", "1"),
        ("{flag} {none} {user.n}", "true null 3"),
        ("{missing?}|{user.nope?}|{name?}", "||Ann"),
        ("{missing} {user.nope} {items.9}", "{missing} {user.nope} {items.9}"),
        ("{{name}} {{ {name} }}", "{name} { Ann }"),
        (
            'JSON: {"a": 1} {x:>10} {name.__class__} {name[0]} { name }',
            'JSON: {"a": 1} {x:>10} {name.__class__} {name[0]} { name }',
        ),
        ("{name.upper}", "{name.upper}"),
        ("{name:>10} {name!r}", "{name:>10} {name!r}"),
        ("no braces", "no braces"),
        ("{uni}{items}", 'é["a",{"b":1}]'),
        ("}{", "}{"),
    ],
)
def test_render(template: str, expected: str) -> None:
    assert render_template(template, STATE) == expected


def test_renders_from_tracked_state_without_recording() -> None:
    recorder = Recorder()
    state = track({"cart": {"items": [1, 2]}}, recorder)
    assert render_template("{cart.items}", state) == "[1,2]"
    assert recorder.ops == []


def test_template_references() -> None:
    assert template_references("{a} {b.c?} {user:x} {a} {{d}} {x:>3}") == ["a", "b.c", "user:x"]
