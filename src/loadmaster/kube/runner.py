"""The long-running loop of ``loadmaster kube run``: step, measure, report health, until told to stop.

Kept out of the CLI so that tests and benchmarks drive the same loop. A step
that raises is logged with its traceback and the loop goes on: a fault in one
cycle must not end the scheduler. A loop that keeps failing stops recording
finished steps, so ``/healthz`` fails after ``Health.liveness_timeout_s`` and
the kubelet restarts the container.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from loadmaster.kube.cluster import KubeCluster, StepReport
from loadmaster.kube.metrics import SchedulerMetrics
from loadmaster.kube.serving import Health
from loadmaster.kube.translate import KubeError

if TYPE_CHECKING:
    from loadmaster.kube.reclaim import KubeReclaimer

log = logging.getLogger(__name__)


def wait_listed(cluster: KubeCluster, timeout_s: float, stop: threading.Event) -> None:
    """Wait until every informer has listed its kind once; a clear error after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cluster.listed():
        if time.monotonic() > deadline:
            versions = {k: i.version for k, i in cluster.informers.items()}
            raise KubeError(f"could not list nodes, pods and PodGroups within {timeout_s:g} s ({versions})")
        if stop.wait(0.05):
            return


def run_loop(
    cluster: KubeCluster,
    *,
    interval_s: float,
    max_steps: int = 0,
    metrics: SchedulerMetrics | None = None,
    health: Health | None = None,
    stop: threading.Event | None = None,
    on_report: Callable[[int, StepReport], None] | None = None,
    before_step: Callable[[], None] | None = None,
    reclaim: KubeReclaimer | None = None,
) -> int:
    """Step every ``interval_s`` until ``stop`` is set or ``max_steps`` steps ran (0: no limit); steps run.

    ``before_step`` runs first in each iteration (the CLI re-reads the queues ConfigMap there);
    ``reclaim`` looks for idle jobs after each step that led (it keeps its own, longer interval). A
    failing reclaim look is logged and does not stop scheduling.
    """
    stop = stop if stop is not None else threading.Event()
    listener = None
    if metrics is not None:  # for this loop only: a second loop on the same cluster must not count twice
        listener = functools.partial(_observe_stat, metrics)
        cluster.stats.listeners.append(listener)
    steps = 0
    try:
        while not stop.is_set() and (max_steps == 0 or steps < max_steps):
            try:
                if before_step is not None:
                    before_step()
                report = cluster.step()
            except Exception:
                log.exception("scheduling step failed; the next one starts over from the informers' cache")
            else:
                _observe(cluster, report, metrics, health)
                if reclaim is not None and report.leader:
                    _reclaim(reclaim)
                if on_report is not None:
                    on_report(steps + 1, report)
            steps += 1
            if max_steps == 0 or steps < max_steps:
                stop.wait(interval_s)
    finally:
        if listener is not None:
            cluster.stats.listeners.remove(listener)
    return steps


def _reclaim(reclaim: KubeReclaimer) -> None:
    try:
        reclaim.step()
    except Exception:
        log.exception("reclaim look failed; scheduling goes on, the next look tries again")


def _observe_stat(metrics: SchedulerMetrics, name: str, value: float) -> None:
    """Route one of :class:`~loadmaster.kube.cluster.Stats`' emitted values to its series."""
    if name in {"bind_latency_s", "bind_error_latency_s"}:
        metrics.observe_bind(value, ok=name == "bind_latency_s")


def _observe(
    cluster: KubeCluster, report: StepReport, metrics: SchedulerMetrics | None, health: Health | None
) -> None:
    staleness = {kind: informer.staleness_s for kind, informer in cluster.informers.items()}
    if metrics is not None:
        metrics.observe_leader(report.leader)
        if cluster.checkpoint is not None:
            checkpoint = cluster.checkpoint
            metrics.observe_checkpoint(checkpoint.saves, checkpoint.failures, checkpoint.last_saved_at_s)
        metrics.observe_staleness(staleness)
        if report.view is not None:
            binds = {key: True for key, _ in report.bound} | dict.fromkeys(report.failed_binds, False)
            metrics.observe_cycle(report, binds)
    if health is not None:
        synced = all(i.version > 0 for i in cluster.informers.values())
        health.stepped(synced, "leader" if report.leader else cluster.lease.role(), staleness)
    if report.bound or report.evicted or report.rolled_back:
        log.info(
            "cycle",
            extra={
                "bound": len(report.bound),
                "evicted": len(report.evicted),
                "rolled_back": len(report.rolled_back),
                "waiting": len(report.waiting),
                "leader": report.leader,
            },
        )
