"""The one run lease keeper: who is executing a run (a workflow run or resume, the
continuation of a paused run), for as long as it does.

A lease is a row (a hash field on Redis) saying "owner X holds run R until T"; taking and
renewing it is one compare-and-swap (`BaseDb.claim_run`), and T is computed by the
database's own clock, so clients whose clocks disagree still agree on who holds a run.
While the run executes, a thread of the lease's own renews it every third of its time to
live. It is never renewed from the run's event loop: a sync step or tool that blocks that
loop for longer than the lease must not let another process claim a run that is still
running. If the process dies, renewals stop and the lease expires: then the run can be
resumed (or continued) by another process.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from statewise.db.base import BaseDb
from statewise.db.store import new_id

log = logging.getLogger("statewise.run")


class RunLease:
    """A held run lease, renewed from its own thread until `release`."""

    def __init__(self, db: BaseDb, session_id: str, run_id: str, owner: str, ttl: float) -> None:
        self.db = db
        self.session_id = session_id
        self.run_id = run_id
        self.owner = owner
        self.ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease:{run_id}", daemon=True)

    @classmethod
    def claim(cls, db: BaseDb, session_id: str, run_id: str, ttl: float) -> RunLease | None:
        """Take the lease on a run and start renewing it; None while another owner's
        lease is live (blocking I/O: from async code, call through `db.run_io`)."""
        owner = new_id()
        if not db.claim_run(session_id, run_id, owner, ttl):
            return None
        return cls(db, session_id, run_id, owner, ttl).start()

    def start(self) -> RunLease:
        """Renew from now on (for a lease taken with `db.claim_run` by its owner)."""
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                held = self.db.claim_run(self.session_id, self.run_id, self.owner, self.ttl)
            except Exception as exc:  # the database is away for a moment: try again soon
                log.debug("renewing the lease on run %s failed: %s", self.run_id, exc)
                continue
            if not held:
                log.warning(
                    "run %s of session %s: its lease expired before it was renewed and "
                    "another process holds it now",
                    self.run_id,
                    self.session_id,
                )

    def release(self) -> None:
        """Stop renewing and give the lease up (blocking I/O)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with contextlib.suppress(Exception):
            self.db.release_run(self.session_id, self.run_id, self.owner)

    async def arelease(self) -> None:
        await self.db.run_io(self.release)


__all__ = ["RunLease"]
