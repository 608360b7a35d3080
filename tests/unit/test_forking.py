"""A forked child inherits its parent's objects frozen (out of its collections' reach), and the
parent gets them back: workers and helpers forked from a process that holds objects of other
threads (Playwright's greenlets, in the browser tests) crashed in a collection that touched one."""

from __future__ import annotations

import gc
import os

from loadmaster import forking
from loadmaster.parallel import LocalPool


def _frozen_in_child(_: object) -> int:
    return gc.get_freeze_count()


def test_a_pool_worker_starts_with_the_parents_objects_frozen() -> None:
    kept = [object() for _ in range(10)]  # something of the parent's for the child to inherit
    assert gc.get_freeze_count() == 0
    with LocalPool(1) as pool:
        pool.submit(_frozen_in_child, None)
        (finished,) = pool.wait(30.0)
    assert finished.error is None, finished.error
    assert finished.value > 0  # the worker's collections never traverse what it inherited
    assert gc.get_freeze_count() == 0  # the parent's objects are collected as before
    assert kept


def test_a_plain_fork_freezes_in_the_child_only() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, str(gc.get_freeze_count()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as reader:
        assert int(reader.read()) > 0
    assert gc.get_freeze_count() == 0


def test_objects_frozen_before_the_fork_stay_frozen_in_the_parent() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        assert gc.get_freeze_count() >= frozen  # not undone by the handler: not its freeze
    finally:
        gc.unfreeze()
    forking.install()  # installing again is a no-op (one pair of handlers per process)
