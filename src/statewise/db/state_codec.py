"""The one place where state crosses the storage boundary.

Everything a commit stores and everything a load returns passes through `StateCodec`:
op encoding (paths relative to their scope, secret keys whole and encrypted), snapshot
encoding, scope decoding, and the redacted forms written to the event log (state deltas
and conflict records). A codec that changes how values are stored (encryption of other
keys, a tenant's own codec) hooks in here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from statewise.db.planning import SCOPE_PREFIX, scope_of
from statewise.db.records import DeltaRecord, DeltaSegment, NewEvent, RunRecord, ScopeKey
from statewise.exceptions import SecretsError
from statewise.state.ops import Op
from statewise.state.secrets import (
    REDACTED,
    Cipher,
    is_encrypted,
    mask_json,
    mask_text,
    redact_conflict,
    registered_secrets,
    secret_values,
)
from statewise.state.tracked import shared_plain, to_plain


class StateCodec:
    """Encodes state for storage and decodes it back, with `secret_keys` encrypted."""

    def __init__(self, secret_keys: Iterable[str] = (), cipher: Cipher | None = None) -> None:
        self.secret_keys = frozenset(secret_keys)
        self._cipher = cipher

    @property
    def cipher(self) -> Cipher:
        if self._cipher is None:
            self._cipher = Cipher.from_env()
        return self._cipher

    @property
    def configured_cipher(self) -> Cipher | None:
        """The cipher given explicitly (None: read from the environment when needed)."""
        return self._cipher

    def secrets_in(self, state: Mapping[str, Any]) -> frozenset[str]:
        """Which keys of a merged state are secret: declared, or recorded in the data
        (the app scope's `__secrets__` registry), so every agent on a database agrees."""
        return self.secret_keys | registered_secrets(state)

    def secret_values_in(self, state: Mapping[str, Any]) -> tuple[str, ...]:
        """The secret values of a merged state, as texts to mask wherever they appear."""
        secrets = self.secrets_in(state)
        return secret_values(state, secrets) if secrets else ()

    def mask_commit(
        self, state: Mapping[str, Any], events: Sequence[NewEvent], run: RunRecord | None
    ) -> tuple[Sequence[NewEvent], RunRecord | None]:
        """`events` and `run` as stored: every secret value of `state` (the state this
        commit leaves) masked by value in them, like CI systems mask secrets in logs.
        What earlier commits stored stays as it was (the log is append-only)."""
        values = self.secret_values_in(state)
        if not values:
            return events, run
        masked_events = [
            e if (data := mask_json(e.data, values)) is e.data else replace(e, data=data)
            for e in events
        ]
        if run is not None:
            run = replace(
                run,
                input=mask_text(run.input, values) if run.input else run.input,
                content=mask_text(run.content, values) if run.content else run.content,
                error=mask_text(run.error, values) if run.error else run.error,
                messages=mask_json(run.messages, values),
            )
        return masked_events, run

    # ---- storage -> state ----------------------------------------------------------------

    def decode_scope(self, key: ScopeKey, data: Mapping[str, Any]) -> dict[str, Any]:
        """A scope's stored keys as the merged state names them, secrets decrypted."""
        prefix = SCOPE_PREFIX[key.kind]
        out = {}
        for name, value in data.items():
            full = prefix + name
            if is_encrypted(value):
                value = self._decrypt(full, value)
            out[full] = value
        return out

    def decode_ops(self, key: ScopeKey, deltas: Iterable[DeltaRecord]) -> list[Op]:
        """The ops of stored deltas of one scope, in order, as the merged state applies
        them: paths under the merged state's names, a secret's encrypted value decrypted."""
        prefix = SCOPE_PREFIX[key.kind]
        out: list[Op] = []
        for delta in deltas:
            memo = delta.decoded
            if memo is not None and memo[0] is self:
                out += memo[1]  # (ops are frozen and applying one copies its value)
                continue
            ops = []
            for raw in delta.ops:
                op = Op.from_json(dict(raw))
                full = prefix + str(op.path[0])
                value = self._decrypt(full, op.value) if is_encrypted(op.value) else op.value
                ops.append(Op(op=op.op, path=(full, *op.path[1:]), value=value, index=op.index))
            delta.decoded = (self, ops)
            out += ops
        return out

    def _decrypt(self, full: str, value: Any) -> Any:
        """Any agent decrypts what it finds encrypted (never encrypting it twice later); one
        that did not declare the key keeps the value as stored when it has no key."""
        try:
            return self.cipher.decrypt_value(value)
        except SecretsError:
            if full in self.secret_keys:
                raise
            return value

    # ---- state -> storage ----------------------------------------------------------------

    def encode_op(
        self, op: Op, root: Mapping[str, Any], kind: str, secrets: frozenset[str]
    ) -> dict[str, Any]:
        """An op as stored: path relative to its scope; secrets whole and encrypted."""
        full = str(op.path[0])
        name = scope_of(full)[1]
        if full in secrets:
            if full not in root:
                return {"op": "delete", "path": [name]}
            value = self.cipher.encrypt_value(to_plain(root[full]))
            return {"op": "set", "path": [name], "value": value}
        data = op.to_json()
        if kind != "session":
            data["path"] = [name, *data["path"][1:]]
        return data

    def encode_snapshot(
        self, root: Mapping[str, Any], key: ScopeKey, secrets: frozenset[str]
    ) -> dict[str, Any]:
        """The complete stored form of one scope of the merged state."""
        prefix = SCOPE_PREFIX[key.kind]
        out = {}
        for full, value in root.items():
            if scope_of(full)[0] != key.kind:
                continue
            plain = shared_plain(value)  # encoded right away: no copy needed
            if full in secrets:
                plain = self.cipher.encrypt_value(plain)
            out[full[len(prefix) :]] = plain
        return out

    # ---- the event log (what readers of events may see) ---------------------------------

    def redact_segment(
        self, segment: DeltaSegment, kind: str, secrets: frozenset[str]
    ) -> dict[str, Any]:
        """A delta segment as the event log shows it: secret (and encrypted) values hidden."""
        secret_names = {scope_of(k)[1] for k in secrets if scope_of(k)[0] == kind}
        ops = [
            {**raw, "value": REDACTED}
            if "value" in raw and (raw["path"][0] in secret_names or is_encrypted(raw["value"]))
            else raw
            for raw in segment.ops
        ]
        return {"source": segment.source, "ops": ops}

    def conflict_record(
        self, conflict: Mapping[str, Any], secrets: frozenset[str]
    ) -> dict[str, Any]:
        """The `conflict_resolved` event, the stored delta conflict and the run output's
        record of one conflict: a secret key's values hidden."""
        return redact_conflict(conflict, secrets)
