"""Reports of finished runs: Parquet/CSV tables, PNG charts and a self-contained HTML report."""

from loadmaster.report.html import write_html_report
from loadmaster.report.plots import write_plots
from loadmaster.report.tables import write_job_table, write_timeline

__all__ = ["write_html_report", "write_job_table", "write_plots", "write_timeline"]
