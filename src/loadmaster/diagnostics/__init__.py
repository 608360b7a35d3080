"""Diagnostics of distributed training jobs from GPU telemetry, and reclaiming idle GPUs.

Read a job into a :class:`JobFrame` (store, Arrow tables or Parquet/CSV),
``diagnose`` it into typed :class:`Finding` s, write a report; see
docs/diagnostics.md.
"""

from loadmaster.diagnostics.detectors import DetectorConfig, detect
from loadmaster.diagnostics.findings import Evidence, Finding, FindingKind
from loadmaster.diagnostics.frame import JobFrame, frame_from_files, frame_from_store, frame_from_tables
from loadmaster.diagnostics.iterations import IterationTimes, read_pai_minibatch, slow_group, stragglers
from loadmaster.diagnostics.reclaim import ReclaimReport, ReclaimRule, reclaim_report
from loadmaster.diagnostics.report import Diagnosis, diagnose, write_report

__all__ = [
    "DetectorConfig",
    "Diagnosis",
    "Evidence",
    "Finding",
    "FindingKind",
    "IterationTimes",
    "JobFrame",
    "ReclaimReport",
    "ReclaimRule",
    "detect",
    "diagnose",
    "frame_from_files",
    "frame_from_store",
    "frame_from_tables",
    "read_pai_minibatch",
    "reclaim_report",
    "slow_group",
    "stragglers",
    "write_report",
]
