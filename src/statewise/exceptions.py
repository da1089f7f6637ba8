"""Every error statewise raises to its caller, in one tree.

    StatewiseError
    ├── ConfigurationError            bad constructor arguments, unknown model strings
    │   └── MissingDependencyError    an optional extra is not installed (names the extra)
    ├── StateError
    │   ├── StateSerializationError   a value that is not JSON (names the path and the type)
    │   ├── StateValidationError      a write that breaks state_schema (names key and reason)
    │   ├── StateOpError              an operation on the wrong type (append to a dict, ...)
    │   ├── StateConflictError        a `strict` key set to different values concurrently
    │   ├── ReservedKeyError          a reserved name (`__ttl__`, any `__x__`) written
    │   ├── StaleStateVersionError    a write based on a state version that moved on
    │   ├── TemplateKeyError          `strict_templates=True`: instructions name a missing key
    │   └── TempScopeError            a `temp:` key written outside a run
    ├── StorageError
    │   ├── InvalidIdError            a session/user id that is not a short printable string
    │   ├── SessionNotFoundError
    │   │   └── SessionDeletedError   the session was deleted while a run was writing it
    │   ├── SessionExistsError        a create (or fork) found the session already there
    │   ├── CorruptRecordError        a stored row that cannot be decoded (names the session)
    │   ├── VersionConflict           internal: a compare-and-swap lost the race
    │   ├── SchemaVersionError        the database was written by an unknown schema version
    │   ├── HistoryCompactedError     a version below the retained horizon (names both)
    │   ├── CommitIdExpiredError      a retried commit whose id was forgotten by retention
    │   └── DatabaseUnavailableError  cannot reach or open the database (password masked)
    ├── SecretsError                  missing or wrong STATEWISE_ENCRYPTION_KEY
    ├── InvalidInputError             run input that cannot be stored (not valid Unicode)
    ├── ModelError
    │   ├── ModelHTTPError            the provider answered with an error status
    │   │   ├── ModelAuthenticationError
    │   │   ├── ModelRateLimitError
    │   │   └── ContextLengthExceededError
    │   ├── ModelConnectionError      no answer, or the connection broke mid-stream
    │   ├── MalformedResponseError    the provider's answer does not parse (or a stream ended
    │   │                             without its terminator)
    │   ├── CassetteMismatchError     a strict ReplayModel got a request it did not record
    │   ├── CassetteExhaustedError    a ReplayModel ran out of recorded exchanges
    │   └── ModelRequestsDisabledError real requests were switched off (tests)
    └── RunError                      a run cannot go on (no model, step limit, ...)
        ├── RunNotFoundError          the session has no run with that id
        ├── RunNotPausedError         continuing a run that is not paused (or was continued)
        ├── RunTimeoutError           a run passed its `run_timeout` (also a TimeoutError)
        ├── InvalidApprovalError      approvals that do not answer a paused run's tool calls
        └── OutputValidationError     an answer that does not fit output_schema (names the
                                      field and the reason), after every retry

Errors a model can act on (a tool that raises, bad tool arguments, an unknown tool) never
surface as exceptions: they go back to the model as the tool's result. The three classes
of that kind live beside the code that raises and catches them, outside this tree:
`ToolArgumentsError` (`statewise.tools.errors`), `ToolResultError` (`statewise.run.tool_calls`)
and `MCPToolError` (`statewise.tools.mcp`).

`VersionConflict` is the storage interface's own signal: the state engine catches it and
rebases; only code that calls a backend's `commit` directly ever sees it.
"""

from __future__ import annotations


class StatewiseError(Exception):
    """Base of every statewise error."""


class ConfigurationError(StatewiseError, ValueError):
    """An object was built with arguments that cannot work."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package!r} is not installed; install it with: pip install 'statewise[{extra}]'"
        )
        self.package = package
        self.extra = extra


class StateError(StatewiseError):
    """Something is wrong with a state value or operation."""


class TemplateKeyError(StateError, LookupError):
    """With `strict_templates=True`, instructions reference a key the state does not have."""

    def __init__(self, key: str, who: str | None = None) -> None:
        super().__init__(
            f"{who or 'agent'}: instructions reference {{{key}}}, which is not in the session "
            f"state (strict_templates=True); set it, or write {{{key}?}} to render it as empty"
        )
        self.key = key


class StateSerializationError(StateError, TypeError):
    """A value written to state is not JSON-serializable."""


class StateValidationError(StateError, ValueError):
    """A write does not satisfy the declared state schema."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid value for state key {key!r}: {reason}")
        self.key = key
        self.reason = reason


class StateOpError(StateError, TypeError):
    """An operation cannot apply to the value at its path."""


class StateConflictError(StateError):
    """A key declared `strict` was set to different values by concurrent writers."""

    def __init__(self, path: str, theirs: object, ours: object, *, key: str | None = None) -> None:
        super().__init__(
            f"conflicting writes to strict state key {path!r}: "
            f"stored value {theirs!r}, this run wrote {ours!r}"
        )
        self.path = path
        self.theirs = theirs
        self.ours = ours
        self.key = key  # the top-level state key the path is under

    def masked(self, marker: str) -> StateConflictError:
        """The same conflict with both values shown as `marker` (a secret key's)."""
        return StateConflictError(self.path, marker, marker, key=self.key)


class ReservedKeyError(StateError, ValueError):
    """Names like `__ttl__` (any `__x__`) hold the engine's bookkeeping; only it writes them."""


class StaleStateVersionError(StateError):
    """The session's state moved past the version the caller based its write on."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id!r} is at state version {actual}, not {expected}: "
            "read it again and retry"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class TempScopeError(StateError):
    """`temp:` keys only exist during a run."""


class StorageError(StatewiseError):
    """The database could not do what was asked."""


class InvalidIdError(StorageError, ValueError):
    """A session or user id is not acceptable."""


class SessionNotFoundError(StorageError, KeyError):
    """No session with that id exists."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence
        return str(self.args[0]) if self.args else "session not found"


class SessionDeletedError(SessionNotFoundError):
    """The session was deleted while a transaction on it was open; deleting is final."""


class SessionExistsError(StorageError):
    """A session being created (a new session, a fork target) already exists."""


class CorruptRecordError(StorageError):
    """A stored record cannot be decoded."""


class VersionConflict(StorageError):
    """A compare-and-swap lost: the stored version moved since the commit's base."""

    def __init__(self, scope: str, expected: int, actual: int | None = None) -> None:
        super().__init__(f"{scope}: expected version {expected}, stored version is {actual}")
        self.scope = scope
        self.expected = expected
        self.actual = actual


class SchemaVersionError(StorageError):
    """The database schema was written by a different statewise version."""


class HistoryCompactedError(StorageError):
    """A version older than what a retention policy kept was asked for (state at it,
    a diff, rollback or fork to it, its history): it was folded into a snapshot."""

    def __init__(self, session_id: str, version: int | str, oldest: int) -> None:
        what = f"run {version!r}" if isinstance(version, str) else f"version {version}"
        super().__init__(
            f"session {session_id!r}: {what} is older than its retained history, "
            f"which starts at version {oldest} (a retention policy compacted what came before)"
        )
        self.session_id = session_id
        self.version = version
        self.oldest = oldest


class CommitIdExpiredError(StorageError):
    """A commit retried with an id made before the time from which the session still
    remembers commit ids: whether it landed can no longer be told, so it is refused
    rather than risk applying it twice."""


class DatabaseUnavailableError(StorageError, ConnectionError):
    """The database cannot be opened or reached."""


class SecretsError(StatewiseError):
    """Secret state cannot be encrypted or decrypted with the configured key."""


class InvalidInputError(StatewiseError, ValueError):
    """A run's input cannot be stored (e.g. it is not valid Unicode)."""


class ModelError(StatewiseError):
    """A model request failed."""


class ModelHTTPError(ModelError):
    """The provider answered with an error status."""

    def __init__(self, message: str, *, status_code: int | None = None, body: object = None):
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class ModelAuthenticationError(ModelHTTPError):
    """The API key was missing or refused."""


class ModelRateLimitError(ModelHTTPError):
    """The provider kept answering 429 after every retry."""


class ContextLengthExceededError(ModelHTTPError):
    """The request is longer than the model's context window."""


class ModelConnectionError(ModelError):
    """The request got no answer, or the connection broke while the answer streamed in.

    `deltas` is how many streamed pieces had already reached the caller when it broke (0
    for a request that got no answer); the message says so too.
    """

    def __init__(self, message: str, *, deltas: int = 0) -> None:
        super().__init__(message)
        self.deltas = deltas


class MalformedResponseError(ModelError):
    """The provider's answer does not parse, or a stream ended without its terminator."""


class CassetteMismatchError(ModelError):
    """A strict `ReplayModel` got a request that differs from the recorded one."""


class CassetteExhaustedError(ModelError):
    """A `ReplayModel` was asked for more exchanges than its cassette holds."""


class ModelRequestsDisabledError(ModelError):
    """Real model requests are switched off (see statewise.models.ALLOW_MODEL_REQUESTS)."""


class RunError(StatewiseError):
    """A run cannot go on."""


class RunNotFoundError(RunError, KeyError):
    """The session has no run with that id."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RunNotPausedError(RunError):
    """The run is not paused: it was already continued (by this or another process), or
    it never paused. A paused run is continued exactly once."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class RunTimeoutError(RunError, TimeoutError):
    """A run passed its deadline (`run_timeout=`); the run is recorded as failed."""


class InvalidApprovalError(RunError, ValueError):
    """Approvals that do not answer a paused run's pending tool calls (one is missing,
    unknown, or malformed)."""


class OutputValidationError(RunError, ValueError):
    """The model's answer does not fit the run's `output_schema`, after every retry.

    `problems` lists each failing field (a dotted path, `""` for the whole answer) with
    the reason; the message names them."""

    def __init__(self, schema: str, problems: list[tuple[str, str]]) -> None:
        shown = "; ".join(f"{path or 'answer'}: {reason}" for path, reason in problems[:8])
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        super().__init__(f"the answer does not fit {schema}: {shown}{more}")
        self.schema = schema
        self.problems = problems
