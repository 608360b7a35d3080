"""admit: ask every admit plugin whether a job may be considered in this cycle."""

from __future__ import annotations

from loadmaster.scheduling.session import Session


def run(session: Session) -> None:
    """Record a WAIT status for each job some admit plugin holds back."""
    plugins = session.profile.admit
    if not plugins:
        return
    for pending in session.queue:
        for plugin in plugins:
            status = plugin.admit(pending, session.ctx)
            if not status.ok:
                session.statuses[pending.job.id] = status
                break
