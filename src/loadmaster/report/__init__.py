"""Reports of finished runs: Parquet/CSV tables, PNG charts and a self-contained HTML report.

The names below are imported from their modules when first used: each module loads a heavy library
(pyarrow, matplotlib, plotly), and a caller that needs one of them must not pay for the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadmaster.report.html import write_html_report
    from loadmaster.report.plots import write_plots
    from loadmaster.report.tables import write_job_table, write_timeline

_HOME = {
    "write_html_report": "loadmaster.report.html",
    "write_plots": "loadmaster.report.plots",
    "write_job_table": "loadmaster.report.tables",
    "write_timeline": "loadmaster.report.tables",
}

__all__ = ["write_html_report", "write_job_table", "write_plots", "write_timeline"]


def __getattr__(name: str) -> Any:
    """``write_plots`` and the others, imported from their own module on first use (PEP 562)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
