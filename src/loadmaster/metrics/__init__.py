"""Outcome metrics: what a run's JobTable and Timeline say about a scheduling policy."""

from loadmaster.metrics.reasons import wait_reasons
from loadmaster.metrics.summary import (
    GroupStats,
    RunSummary,
    bounded_slowdown,
    completed_mask,
    jain_index,
    job_bounded_slowdown,
    pool_total,
    rejected_mask,
    slowdown,
    summarize,
    time_weighted_mean,
)

__all__ = [
    "GroupStats",
    "RunSummary",
    "bounded_slowdown",
    "completed_mask",
    "jain_index",
    "job_bounded_slowdown",
    "pool_total",
    "rejected_mask",
    "slowdown",
    "summarize",
    "time_weighted_mean",
    "wait_reasons",
]
