"""Processes forked from this one inherit its objects frozen, out of reach of their collections.

A forked child starts with a copy of every object of its parent, including objects that belong to
threads the child does not have (a greenlet of Playwright's event loop, in a test process that
drives a browser). When the child's garbage collector traverses such an object it can crash: the
test suite's `simulate` runs crashed so, intermittently, in the profile workers and in the output
helpers, with "Garbage-collecting" on top of the stack.

:func:`install` registers fork handlers (``os.register_at_fork``): the parent moves everything the
collector tracks into the permanent generation (``gc.freeze``) just before the fork and back just
after it, in the parent only. The child's collections then only ever traverse what the child
makes, which is all they can free anyway, and nothing runs in the child between the fork and the
freeze. This is also the practice Python's documentation gives for forking servers (no
copy-on-write of the inherited objects' headers by the child's collections).

A process that froze objects itself before forking keeps them frozen: the parent unfreezes only
what it froze for the fork.
"""

from __future__ import annotations

import gc
import os


class _Handlers:
    """The fork handlers, and whether the last fork's freeze was theirs to undo."""

    def __init__(self) -> None:
        self.installed = False
        self.froze = False

    def before(self) -> None:
        self.froze = gc.get_freeze_count() == 0
        gc.freeze()

    def after_in_parent(self) -> None:
        if self.froze:
            gc.unfreeze()
        self.froze = False


_HANDLERS = _Handlers()


def install() -> None:
    """Register the handlers, once per process (a forked child inherits them)."""
    if _HANDLERS.installed or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(before=_HANDLERS.before, after_in_parent=_HANDLERS.after_in_parent)
    _HANDLERS.installed = True


install()
