"""A dict/list view of state that records every mutation as an `Op`, in O(change).

`TrackedDict` and `TrackedList` are real dict/list subclasses that *are* the storage, so
`json.dumps`, `==`, `isinstance(x, dict)` and printing behave natively. Nested plain
containers are wrapped lazily on access by a shallow copy that replaces the child in its
parent's storage. Wrapping is therefore copy-on-write: a plain container inside the tree
is never mutated in place, so recorded ops and undo entries share plain values instead of
copying them. Values in ops are read-only by contract.

Every write is converted by `to_json_value` first (a bad value raises
`StateSerializationError` naming the path and changes nothing). Removed or overwritten
containers are detached: mutating them records no op and does not touch state (they still
log undo info, so a rollback that re-attaches them restores them exactly).
"""

from __future__ import annotations

from typing import Any

from statewise.state._tracked_base import snapshot
from statewise.state._tracked_dict import TrackedDict, track
from statewise.state._tracked_list import TrackedList
from statewise.state.jsonvalue import copy_json
from statewise.state.recorder import Recorder

__all__ = ["Recorder", "TrackedDict", "TrackedList", "shared_plain", "to_plain", "track"]


def to_plain(value: Any) -> Any:
    """A deep plain copy: tracked containers become ordinary dicts and lists."""
    return copy_json(value)


def shared_plain(value: Any) -> Any:
    """A plain value equal to `value`, for reading at once (encoding it), never mutating.

    Unlike `to_plain`, only the tracked containers are copied: the plain values inside the
    tree are shared, which is safe because the tree never changes them in place (it wraps
    a plain container in a copy before writing to it), so encoding a big state for a
    snapshot does not copy it first.
    """
    return snapshot(value)
