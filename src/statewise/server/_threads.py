"""The server's hops off the event loop.

Blocking calls the async routes make (a database read, a run's output with its state)
run in statewise's shared worker threads (`statewise.db.threads.run_blocking`, the same
threads a network database's I/O uses), so the loop never waits on them.
A hop there costs a fifth of `loop.run_in_executor`'s CPU, and a run request makes two.
"""

from __future__ import annotations

from statewise.db.threads import run_blocking as off_loop

__all__ = ["off_loop"]
