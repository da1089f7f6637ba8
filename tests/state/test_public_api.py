import statewise.state as state


def test_all_is_sorted_and_complete() -> None:
    assert state.__all__ == sorted(state.__all__)
    for name in state.__all__:
        assert hasattr(state, name), name
    required = {
        "Op",
        "apply_op",
        "apply_ops",
        "Recorder",
        "TrackedDict",
        "TrackedList",
        "track",
        "to_plain",
        "to_json_value",
        "Rules",
        "Rule",
        "Conflict",
        "rebase",
        "render_template",
        "StateSchema",
        "Reducer",
        "Secret",
        "Cipher",
        "redact",
        "MISSING",
    }
    assert required <= set(state.__all__)
