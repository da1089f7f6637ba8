"""Session summaries: a long conversation condensed by the model, so a prompt stays
bounded while the full history stays stored and explainable.

The summary lives in the session's own state under the engine's reserved key
`__summary__`, like `__ttl__`: every new summary is a versioned write (a delta in the
state history, with a `session_summary` event naming the runs it covers), it travels with
the state through forks, rollbacks and compaction, and it is hidden from state reads and
from templates. Only the engine writes it.

Each update folds the previous summary and the runs completed since it into a new one,
so it reads a bounded number of runs whatever the session's age. A summary that fails
(the model errs or times out) is logged and skipped: it never fails the run it follows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from statewise.db.records import NewEvent, RunRecord, ScopeKey
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import OutputValidationError
from statewise.models.base import Model
from statewise.models.messages import Message, RequestInfo
from statewise.models.structured import OutputSchema

SUMMARY_KEY = "__summary__"
SUMMARY_EVENT = "session_summary"

_log = logging.getLogger("statewise.summaries")

DEFAULT_PROMPT = (
    "You keep a running summary of a conversation between a user and an assistant. "
    "You are given the summary so far (if any) and the turns that followed it. Write a new "
    "summary that keeps every fact, decision, preference and open question that matters "
    "for continuing the conversation, in a few sentences, and list its main topics. "
    'Answer with JSON only: {"summary": "...", "topics": ["...", "..."]}.'
)


class _Answer(BaseModel):
    summary: str
    topics: list[str] = []


_ANSWER = OutputSchema(_Answer, name="session_summary")


@dataclass(frozen=True, kw_only=True)
class SessionSummary:
    """A summary of a session's runs from its first up to `last_run_id`.

    `runs` counts the runs it covers; `first_run_id`/`last_run_id` name the range, so a
    reader can tell which runs' history the summary stands for."""

    summary: str
    topics: list[str] = field(default_factory=list)
    runs: int = 0
    first_run_id: str | None = None
    last_run_id: str | None = None
    updated_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "topics": list(self.topics),
            "runs": self.runs,
            "first_run_id": self.first_run_id,
            "last_run_id": self.last_run_id,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }

    @classmethod
    def from_dict(cls, data: Any) -> SessionSummary | None:
        """The summary stored in state, or None when there is none (or it is not one)."""
        if not isinstance(data, dict) or not isinstance(data.get("summary"), str):
            return None
        stamp = data.get("updated_at")
        topics = data.get("topics")
        return cls(
            summary=data["summary"],
            topics=[str(t) for t in topics] if isinstance(topics, list) else [],
            runs=int(data.get("runs") or 0),
            first_run_id=data.get("first_run_id"),
            last_run_id=data.get("last_run_id"),
            updated_at=datetime.fromisoformat(stamp) if isinstance(stamp, str) else None,
        )

    def as_context(self) -> str:
        """The summary as the system prompt shows it."""
        covered = f" ({self.runs} earlier run{'s' if self.runs != 1 else ''})" if self.runs else ""
        text = f"Summary of this conversation so far{covered}:\n{self.summary}"
        if self.topics:
            text += "\nTopics: " + ", ".join(self.topics)
        return text


class SessionSummaryManager:
    """Makes and stores session summaries.

    `model` (default: the agent's own) writes them: a cheaper model is a good choice.
    `session_summary_prompt` replaces the instructions it is given,
    `summary_request_message` the closing request. Each update reads at most
    `max_runs_per_update` runs completed since the last summary (older unsummarized runs,
    left behind after a summarizer outage, are skipped rather than read without bound).
    """

    def __init__(
        self,
        model: Model | None = None,
        *,
        session_summary_prompt: str | None = None,
        summary_request_message: str = "Provide the summary of the conversation.",
        max_runs_per_update: int = 10,
    ) -> None:
        if max_runs_per_update < 1:
            raise ValueError(f"max_runs_per_update must be at least 1, got {max_runs_per_update}")
        self.model = model
        self.session_summary_prompt = session_summary_prompt
        self.summary_request_message = summary_request_message
        self.max_runs_per_update = max_runs_per_update

    async def aupdate(
        self, store: StateStore, spec: SessionSpec, model: Model | None
    ) -> SessionSummary | None:
        """Fold the runs completed since the stored summary into a new one and commit it;
        None (after logging why) when there was nothing new or the model failed."""
        chosen = self.model or model
        if chosen is None:
            return None
        try:
            previous = await aread_summary(store, spec.session_id)
            runs = await _runs_since(store, spec.session_id, previous, self.max_runs_per_update)
            if not runs:
                return previous
            answer = await chosen.request(self._messages(previous, runs), RequestInfo())
            summary = _summary_of(answer.content or "", previous, runs)
            if summary is None:
                _log.warning("session %s: the model's summary was empty", spec.session_id)
                return None
            await _store_summary(store, spec, summary)
            return summary
        except Exception as exc:  # a summary must never fail the run it follows
            _log.warning("session %s: no summary made: %s", spec.session_id, exc)
            return None

    def _messages(self, previous: SessionSummary | None, runs: list[RunRecord]) -> list[Message]:
        lines: list[str] = []
        if previous is not None:
            lines += ["Summary so far:", previous.summary, ""]
        lines.append("Turns since then:")
        for run in runs:
            for message in run.messages:
                text = message.get("content")
                if message.get("role") in ("user", "assistant") and isinstance(text, str) and text:
                    lines.append(f"{message['role']}: {text}")
        lines += ["", self.summary_request_message]
        return [
            Message(role="system", content=self.session_summary_prompt or DEFAULT_PROMPT),
            Message(role="user", content="\n".join(lines)),
        ]


async def aread_summary(store: StateStore, session_id: str) -> SessionSummary | None:
    """The session's stored summary (None if it has none, or no such session)."""
    key = ScopeKey("session", session_id)
    scopes = await store.db.run_io(store.db.load_scopes, [key])
    scope = scopes.get(key)
    if scope is None or not scope.version:
        return None
    return SessionSummary.from_dict(store.codec.decode_scope(key, scope.data).get(SUMMARY_KEY))


async def _runs_since(
    store: StateStore, session_id: str, previous: SessionSummary | None, limit: int
) -> list[RunRecord]:
    """The completed runs after the ones `previous` covers, oldest first, at most `limit`."""
    recent = await store.db.aread_runs(session_id, limit=limit, status="completed")
    if previous is None or previous.last_run_id is None:
        return recent
    ids = [run.run_id for run in recent]
    if previous.last_run_id in ids:
        return recent[ids.index(previous.last_run_id) + 1 :]
    return recent  # more than `limit` runs since: the newest `limit` of them


def _summary_of(
    text: str, previous: SessionSummary | None, runs: list[RunRecord]
) -> SessionSummary | None:
    try:
        answer = _ANSWER.parse(text)
        summary, topics = answer.summary.strip(), [t for t in answer.topics if t]
    except OutputValidationError:  # not the JSON asked for: the text is the summary
        summary, topics = text.strip(), []
    if not summary:
        return None
    return SessionSummary(
        summary=summary,
        topics=topics,
        runs=(previous.runs if previous else 0) + len(runs),
        first_run_id=(previous.first_run_id if previous else None) or runs[0].run_id,
        last_run_id=runs[-1].run_id,
        updated_at=datetime.now(UTC),
    )


async def _store_summary(store: StateStore, spec: SessionSpec, summary: SessionSummary) -> None:
    """One commit: the summary in state (a versioned write) and an event naming its range."""
    async with await store.abegin(spec, mode="existing") as txn:
        with txn.state.engine_writes():
            txn.state[SUMMARY_KEY] = summary.to_dict()
        covered = {
            "runs": summary.runs,
            "first_run_id": summary.first_run_id,
            "last_run_id": summary.last_run_id,
        }
        await txn.commit([NewEvent(type=SUMMARY_EVENT, data=covered)], source="session_summary")


__all__ = ["SessionSummary", "SessionSummaryManager", "aread_summary"]
