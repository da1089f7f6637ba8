"""Frontend state sync (what the server's AG-UI route uses, through `Sessions.frontend`):
a frontend's edits merged as a writer, a redacted snapshot, deltas from the stored ops.

**What the frontend last saw.** Every AG-UI run ends by recording, in the session's
event log, the state versions the frontend was brought to (an `agui_synced` event). The
next run's `state` is compared with the state at exactly those versions: what differs
is what the frontend changed, replayed as small ops (a new list item is an append, a
changed field a set of that field) and committed in a transaction opened *at those
versions* (`StateStore.begin(..., at_versions=...)`), so the commit rebases over whatever the agent and other writers committed meanwhile under the
usual rules, with conflicts recorded. A frontend's copy never overwrites the agent's
writes. Kept on the server (not in the state the frontend holds), so the frontend's state
is exactly the session's state. Several frontends on one thread each send back the
versions their copy is at (`forwardedProps.statewise.versions`, from RUN_FINISHED's
metadata), which then count instead of the thread's last sync.

A thread with no recorded sync (a frontend new to the session) contributes only the keys
the session lacks; an empty `state` means "no edits".

**Deltas.** After the snapshot, each commit point reads the ops stored since the versions
last sent (the run's own and any other writer's) and turns them into JSON Patch with a
`PatchMirror`; it never diffs whole states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statewise.db.records import NewEvent, ScopeKey, SessionRecord
from statewise.db.store import SessionSpec, StateStore, owned_spec, scope_of
from statewise.exceptions import ReservedKeyError, StateError, TempScopeError
from statewise.state.edits import fill_missing, replay_edits
from statewise.state.jsonpatch import PatchMirror
from statewise.state.ops import Op
from statewise.state.reserved import is_reserved
from statewise.state.secrets import REDACTED
from statewise.state.tracked import to_plain

SYNC_EVENT = "agui_synced"
_PREFIX = {"session": "", "user": "user:", "app": "app:"}


def hidden(key: str) -> bool:
    """Keys a frontend never sees: the engine's bookkeeping (`__ttl__`, `app:__secrets__`,
    any reserved name) and run-only `temp:` keys."""
    return is_reserved(key) or key.startswith("temp:")


def _versions_json(versions: Mapping[ScopeKey, int]) -> dict[str, int]:
    return {key.kind: version for key, version in versions.items()}


def check_frontend_state(state: Any) -> None:
    """A frontend's `state` writes no engine key (`__x__`) and no run-only `temp:` key."""
    if not isinstance(state, dict):
        raise StateError(f"state must be a JSON object, got {type(state).__name__}")
    for key in state:
        if is_reserved(key):
            raise ReservedKeyError(f"state key {key!r} is reserved and cannot be written")
        if key.startswith("temp:"):
            raise TempScopeError(
                f"state key {key!r}: temp: keys live for one run and are never sent to "
                "a frontend; pass per-run values in forwardedProps"
            )


class FrontendSync:
    """One frontend request's view of a session's state (`record` is None for a session
    the request will create). Versions cross this boundary as `{scope: version}` with
    scopes "session", "user" and "app"."""

    def __init__(self, store: StateStore, spec: SessionSpec, record: SessionRecord | None) -> None:
        self.store = store
        self.db = store.db
        self.spec = spec
        self.record = record
        self.keys = spec.scope_keys()
        self.mirror: PatchMirror | None = None
        self._sent: dict[ScopeKey, int] = {}

    @property
    def scopes(self) -> tuple[str, ...]:
        """The scopes a frontend's versions name."""
        return tuple(key.kind for key in self.keys)

    @property
    def sent(self) -> dict[str, int]:
        """The versions the frontend was last brought to by this request."""
        return _versions_json(self._sent)

    # ---- the frontend's edits ------------------------------------------------------------

    def last_synced(self) -> tuple[dict[str, int], int] | None:
        """The versions the frontend of this thread was last brought to, and how many
        messages the thread had then."""
        if self.record is None:
            return None
        events = self.db.read_events(self.spec.session_id, types=[SYNC_EVENT], limit=1)
        if not events:
            return None
        data = events[-1].data
        raw = data.get("versions") or {}
        versions: dict[str, int] = {key.kind: int(raw.get(key.kind, 0)) for key in self.keys}
        return versions, int(data.get("messages", 0))

    def merge_client_state(
        self,
        state: Any,
        synced: Mapping[str, int] | None,
        check_shared: Callable[[list[str]], None],
    ) -> list[dict[str, Any]]:
        """Commit what the frontend changed in `state`; returns the conflicts recorded.
        `check_shared` is handed the `app:` keys the edits write (shared by every user
        of the app) and raises if the caller may not write them."""
        if state is None or state == {}:
            return []
        check_frontend_state(state)
        if self.record is None:
            # A new session: the run starts from this state (see the route).
            check_shared(sorted(k for k in state if scope_of(k)[0] == "app"))
            return []
        at = None if synced is None else {k: int(synced.get(k.kind, 0)) for k in self.keys}
        # Opened at the versions the frontend saw: its edits rebase like any writer's
        # (versions the session never had are an InvalidInputError, a 422).
        with self.store.begin(self.spec, mode="existing", at_versions=at) as txn:
            secrets = self.store.secret_keys_in(txn.state)  # the data's, not the served app's
            base_view = {
                key: REDACTED if key in secrets else to_plain(value)
                for key, value in txn.state.items()
                if not hidden(key)
            }
            if synced is None:
                fill_missing(txn.state, state)
            else:
                replay_edits(
                    txn.state,
                    base_view,
                    state,
                    unchanged=lambda key, value: key in secrets and value == REDACTED,
                )
            if not txn.has_changes:
                return []
            check_shared(
                sorted(
                    {
                        str(op.path[0])
                        for op in txn.working.recorder.ops
                        if scope_of(str(op.path[0]))[0] == "app"
                    }
                )
            )
            committed = txn.commit(
                events=[
                    NewEvent(
                        type="api_call",
                        data={"call": "agui:state", "base_versions": _versions_json(txn.versions)},
                    )
                ],
                source="agui:frontend_state",
            )
            return committed.conflicts

    # ---- snapshot and deltas ---------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The state now (secrets redacted); deltas are relative to it from here on."""
        record, versions = self.db.probe(self.spec.session_id, self.keys)
        self._check_owner(record)
        state = self.store.state_at(self.spec, versions)
        # The session's own app's secrets (its record's app), whoever serves it.
        secrets = self.store.app_secret_keys(self.spec.app_name) | self.store.secret_keys_in(state)
        self.mirror = PatchMirror(state, secret_keys=secrets, hidden=hidden)
        self._sent = dict(versions)
        return self.mirror.snapshot()

    def catch_up(self) -> list[dict[str, Any]] | dict[str, Any]:
        """The JSON Patch from the versions last sent to the latest ones, made from the
        stored ops; a snapshot (a dict) if the ops do not fit the frontend's copy."""
        assert self.mirror is not None
        record, versions = self.db.probe(self.spec.session_id, self.keys)
        self._check_owner(record)
        ops: list[Op] = []
        for key in self.keys:
            if versions[key] == self._sent.get(key, 0):
                continue
            prefix = _PREFIX[key.kind]
            for delta in self.db.read_deltas(
                key, after_version=self._sent.get(key, 0), upto_version=versions[key]
            ):
                for raw in delta.ops:
                    op = Op.from_json(raw)
                    if prefix:
                        op = Op(
                            op=op.op,
                            path=(prefix + str(op.path[0]), *op.path[1:]),
                            value=op.value,
                            index=op.index,
                        )
                    ops.append(op)
        self._sent = dict(versions)
        if not ops:
            return []
        try:
            return self.mirror.apply(ops)
        except Exception:
            return self.snapshot()

    def _check_owner(self, record: SessionRecord | None) -> None:
        """A session read for this thread is its user's: one another user created since
        the route looked is never shown (`owned_spec` raises for it)."""
        if record is not None:
            owned_spec(self.spec, record)

    def record_sync(self, run_id: str, messages: int) -> None:
        """Remember the versions this thread's frontend now has (see the module doc): an
        event committed through a transaction like every other write (a commit id, the
        session's identity checked)."""
        with self.store.begin(self.spec, mode="existing") as txn:
            txn.commit(
                events=[
                    NewEvent(
                        type=SYNC_EVENT,
                        run_id=run_id,
                        data={"versions": _versions_json(self._sent), "messages": messages},
                    )
                ],
                source="agui:sync",
            )
