"""Ids (`new_id`): unique across threads and forked processes even
though their random halves are drawn from the OS in batches."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from statewise.db.store import new_id


def test_ids_never_repeat_across_threads() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(new_id() for _ in range(2000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for out in made for i in out]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    new_id()  # the parent now holds a batch of random halves
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids, then leave at once
        os.close(read)
        os.write(write, ",".join(new_id()[16:] for _ in range(5)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split(","))
    os.waitpid(pid, 0)
    parent = {new_id()[16:] for _ in range(5)}
    assert len(child) == 5 and not child & parent
