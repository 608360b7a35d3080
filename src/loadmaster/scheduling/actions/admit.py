"""admit: turn on admission, so that every job is checked by the admit plugins before it is placed.

Admission is asked job by job, right before placement, rather than for the
whole queue up front: a quota must see what the binds earlier in the same
cycle used.
"""

from __future__ import annotations

from loadmaster.scheduling.session import Session


def run(session: Session) -> None:
    """Enable per-job admission for the actions that follow."""
    session.admission = True
