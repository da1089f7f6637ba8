"""The state layer: a recording dict view, ops, rebase, reducers, schema, templates.

Pure logic with no I/O; it imports nothing of ours except `statewise.exceptions`.
"""

from statewise.state.jsonvalue import copy_json, format_path, to_json_value
from statewise.state.merge import Conflict, RebaseResult, Rules, rebase
from statewise.state.ops import MISSING, Op, OpKind, Path, apply_op, apply_ops
from statewise.state.reducers import Rule, resolve_rule
from statewise.state.schema import Reducer, Secret, StateSchema
from statewise.state.secrets import Cipher, is_encrypted, redact
from statewise.state.template import render_template, template_references
from statewise.state.tracked import Recorder, TrackedDict, TrackedList, to_plain, track

__all__ = [  # noqa: RUF022 (plain sorted() order; tests check it)
    "Cipher",
    "Conflict",
    "MISSING",
    "Op",
    "OpKind",
    "Path",
    "RebaseResult",
    "Recorder",
    "Reducer",
    "Rule",
    "Rules",
    "Secret",
    "StateSchema",
    "TrackedDict",
    "TrackedList",
    "apply_op",
    "apply_ops",
    "copy_json",
    "format_path",
    "is_encrypted",
    "rebase",
    "redact",
    "render_template",
    "resolve_rule",
    "template_references",
    "to_json_value",
    "to_plain",
    "track",
]
