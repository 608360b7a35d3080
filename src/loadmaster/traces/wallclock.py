"""Wall-clock times in GPU traces (``2020-06-09 18:41:01``) and the origin they are counted from.

Philly and Helios record local times without a zone. They are read as if
they were UTC: durations and gaps are exact except across a daylight-saving
change, and ``origin_epoch_s`` keeps the first submission's clock reading.
"""

from __future__ import annotations

from datetime import datetime

from loadmaster.traces.rows import bad

_EPOCH = datetime(1970, 1, 1)

NO_TIME = frozenset(("", "None", "null", "NULL", "NaN"))
"""Texts that stand for "not recorded" in a time field."""


def clock_s(text: str | None, field: str) -> float | None:
    """``YYYY-MM-DD HH:MM:SS`` as seconds since 1970 read as UTC; None when not recorded."""
    if text is None or text in NO_TIME:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise bad(field, f"must be a time like 2020-06-09 18:41:01 (or empty/None), got {text!r}") from None
    if moment.tzinfo is not None:
        return moment.timestamp()
    return (moment - _EPOCH).total_seconds()


class Origin:
    """The trace's zero: the first job's submission, fixed when the first row is read.

    A streaming reader cannot know the earliest submission up front, so a job
    submitted before the first row's job gets a negative time.
    """

    def __init__(self, meta: dict[str, str]) -> None:
        self._meta = meta
        self._zero: float | None = None

    def submit(self, epoch_s: float, text: str) -> float:
        """``epoch_s`` (a submission) from the origin, making it the origin when it is the first."""
        if self._zero is None:
            self._zero = epoch_s
            self._meta["origin_epoch_s"] = f"{epoch_s:.0f}"
            self._meta["origin"] = text
        return epoch_s - self._zero

    def shift(self, epoch_s: float | None) -> float | None:
        """A later time (start, end) from the origin; only valid after :meth:`submit`."""
        if epoch_s is None or self._zero is None:
            return None
        return epoch_s - self._zero
