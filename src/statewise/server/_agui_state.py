"""AG-UI state sync: the frontend's edits merged as a writer, snapshot, deltas from ops.

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

import re
from collections.abc import Mapping
from typing import Any

from statewise.db.records import NewEvent, ScopeKey, SessionRecord
from statewise.db.store import SessionSpec, owned_spec, scope_of
from statewise.server._auth import Principal
from statewise.server._errors import Problem
from statewise.server._registry import Served
from statewise.state.edits import fill_missing, replay_edits
from statewise.state.jsonpatch import PatchMirror
from statewise.state.ops import Op
from statewise.state.reserved import is_reserved
from statewise.state.secrets import REDACTED
from statewise.state.tracked import to_plain

SYNC_EVENT = "agui_synced"
_RESERVED = re.compile(r"^__.*__$")
_PREFIX = {"session": "", "user": "user:", "app": "app:"}


def hidden(key: str) -> bool:
    """Keys a frontend never sees: the engine's bookkeeping (`__ttl__`, `app:__secrets__`,
    any reserved name) and run-only `temp:` keys."""
    return is_reserved(key) or key.startswith("temp:")


def _versions_json(versions: Mapping[ScopeKey, int]) -> dict[str, int]:
    return {key.kind: version for key, version in versions.items()}


class StateSync:
    """One AG-UI request's view of a session's state."""

    def __init__(self, served: Served, spec: SessionSpec, record: SessionRecord | None) -> None:
        self.served = served
        self.store = served.store
        self.db = served.db
        self.spec = spec
        self.record = record
        self.keys = spec.scope_keys()
        self.mirror: PatchMirror | None = None
        self.sent: dict[ScopeKey, int] = {}

    # ---- the frontend's edits ------------------------------------------------------------

    def last_synced(self) -> tuple[dict[ScopeKey, int], int] | None:
        """The versions the frontend of this thread was last brought to, and how many
        messages the thread had then."""
        if self.record is None:
            return None
        events = self.db.read_events(self.spec.session_id, types=[SYNC_EVENT], limit=1)
        if not events:
            return None
        data = events[-1].data
        raw = data.get("versions") or {}
        versions = {key: int(raw.get(key.kind, 0)) for key in self.keys}
        return versions, int(data.get("messages", 0))

    def merge_client_state(
        self, state: Any, principal: Principal, synced: dict[ScopeKey, int] | None
    ) -> list[dict[str, Any]]:
        """Commit what the frontend changed in `state`; returns the conflicts recorded."""
        if state is None or state == {}:
            return []
        if not isinstance(state, dict):
            raise Problem(422, f"state must be a JSON object, got {type(state).__name__}")
        for key in state:
            if _RESERVED.match(key):
                raise Problem(422, f"state key {key!r} is reserved and cannot be written")
            if key.startswith("temp:"):
                raise Problem(
                    422,
                    f"state key {key!r}: temp: keys live for one run and are never sent to "
                    "a frontend; pass per-run values in forwardedProps",
                )
        if self.record is None:
            # A new session: the run starts from this state (see the route).
            self._check_shared(sorted(k for k in state if scope_of(k)[0] == "app"), principal)
            return []
        # Opened at the versions the frontend saw: its edits rebase like any writer's
        # (versions the session never had are an InvalidInputError, a 422).
        with self.store.begin(self.spec, mode="existing", at_versions=synced) as txn:
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
            self._check_shared(
                sorted(
                    {
                        str(op.path[0])
                        for op in txn.working.recorder.ops
                        if scope_of(str(op.path[0]))[0] == "app"
                    }
                ),
                principal,
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

    @staticmethod
    def _check_shared(keys: list[str], principal: Principal) -> None:
        if keys and not principal.admin:
            raise Problem(
                403,
                f"the app: scope is shared by every user; only an admin key can change "
                f"{', '.join(keys)}",
            )

    # ---- snapshot and deltas ---------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The state now (secrets redacted); deltas are relative to it from here on."""
        record, versions = self.db.probe(self.spec.session_id, self.keys)
        self._check_owner(record)
        state = self.store.state_at(self.spec, versions)
        # The session's own app's secrets (its record's app), whoever serves it.
        secrets = self.store.app_secret_keys(self.spec.app_name) | self.store.secret_keys_in(state)
        self.mirror = PatchMirror(state, secret_keys=secrets, hidden=hidden)
        self.sent = dict(versions)
        return self.mirror.snapshot()

    def catch_up(self) -> list[dict[str, Any]] | dict[str, Any]:
        """The JSON Patch from the versions last sent to the latest ones, made from the
        stored ops; a snapshot (a dict) if the ops do not fit the frontend's copy."""
        assert self.mirror is not None
        record, versions = self.db.probe(self.spec.session_id, self.keys)
        self._check_owner(record)
        ops: list[Op] = []
        for key in self.keys:
            if versions[key] == self.sent.get(key, 0):
                continue
            prefix = _PREFIX[key.kind]
            for delta in self.db.read_deltas(
                key, after_version=self.sent.get(key, 0), upto_version=versions[key]
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
        self.sent = dict(versions)
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
                        data={"versions": _versions_json(self.sent), "messages": messages},
                    )
                ],
                source="agui:sync",
            )
