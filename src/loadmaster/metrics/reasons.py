"""Why jobs waited, and how good the promised start times were (``squeue --start`` checked afterwards)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from loadmaster.model import JobTable

_PLUGIN = re.compile(r"^\[([^\]]+)\]")
MAX_LISTED = 20
"""Jobs that never ran listed by id with their reason (the rest are counted)."""


def wait_reasons(table: JobTable) -> dict[str, object]:
    """A JSON-ready account of waiting: which plugin held jobs back, which jobs never ran and why,
    and the error of the estimated starts that reservations gave.

    ``held_by`` counts, per plugin, the jobs whose last status before they
    started came from it. ``estimate_error_s`` compares each job's first
    estimated start with its real start (positive: later than promised).
    """
    held = Counter(_plugin(reason) for reason in table.wait_reason if reason)
    never = np.flatnonzero(np.isnan(table.start_s))
    estimated = ~np.isnan(table.estimated_start_s) & ~np.isnan(table.start_s)
    error = table.start_s[estimated] - table.estimated_start_s[estimated]
    return {
        "held_by": dict(held.most_common()),
        "never_ran": len(never),
        "never_ran_jobs": {str(table.job_id[i]): str(table.reason[i]) for i in never[:MAX_LISTED]},
        "jobs_with_estimated_start": int(estimated.sum()),
        "estimate_error_s": {
            "mean": float(error.mean()) if error.size else None,
            "p95_abs": float(np.percentile(np.abs(error), 95)) if error.size else None,
            "started_later_than_promised": int((error > 1e-6).sum()),
        },
    }


def _plugin(reason: str) -> str:
    found = _PLUGIN.match(reason)
    return found.group(1) if found else "other"
