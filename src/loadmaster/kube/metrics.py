"""The scheduler's Prometheus series, named as kube-scheduler names them where one exists.

Names, labels, help texts and buckets follow kube-scheduler's
``pkg/scheduler/metrics/metrics.go`` and component-base's leader-election
gauge, so a dashboard or an alert written for kube-scheduler reads loadmaster
too. Series kube-scheduler has no counterpart for carry the ``loadmaster_``
prefix.

======================================================  =========  =======================================
series                                                  type       labels
======================================================  =========  =======================================
``scheduler_schedule_attempts_total``                   counter    ``result`` (scheduled, unschedulable,
                                                                   error), ``profile``
``scheduler_scheduling_attempt_duration_seconds``       histogram  ``result``, ``profile``
``scheduler_scheduling_algorithm_duration_seconds``     histogram  (one observation per cycle)
``scheduler_framework_extension_point_duration_seconds`` histogram ``extension_point="Bind"``, ``status``
                                                                   (Success, Error), ``profile``: the
                                                                   binding latency
``scheduler_pending_pods``                              gauge      ``queue``: active, backoff,
                                                                   unschedulable, gated
``scheduler_preemption_attempts_total``                 counter
``scheduler_preemption_victims``                        histogram
``leader_election_master_status``                       gauge      ``name`` (the Lease): 1 leader, 0 not
``loadmaster_informer_staleness_seconds``               gauge      ``resource``: since the informer last
                                                                   heard from the API server
``loadmaster_gang_rollbacks_total``                     counter    ``profile``
``loadmaster_backfill_walks_skipped_total``             counter    ``profile``: cycles whose backfill
                                                                   walk was not due (``interval_s``)
``loadmaster_fairshare_usage_gpu_seconds``              gauge      ``level`` (user, group), ``owner``: the
                                                                   decayed GPU-seconds fair share reads
                                                                   (Slurm's ``sshare`` EffectvUsage, raw)
``loadmaster_fairshare_checkpoint_writes_total``        counter    ``result`` (written, failed): writes
                                                                   (and failed reads) of the fair-share
                                                                   checkpoint ConfigMap
``loadmaster_fairshare_checkpoint_last_write_timestamp_seconds``
                                                        gauge      when this replica last wrote it (0
                                                                   until it has)
``process_*``                                           (process)  resident memory, CPU, open files
======================================================  =========  =======================================

An attempt is one pod of one cycle, as in kube-scheduler: a pod the cycle
bound is ``scheduled``, one it left waiting with a reason is
``unschedulable``, one whose bind the API refused is ``error``. Its duration
is the cycle's algorithm time plus the pod's own bind. Pending queues: pods
offered to the cycle and waiting are ``unschedulable``; pods never offered
(a gang short of members or of its PodGroup, a pod that fits nowhere even
on an empty cluster) are ``gated``, as kube-scheduler counts pods held by a
PreEnqueue plugin; pods of a gang rolled back this cycle are ``backoff``;
``active`` counts offered pods the cycle decided nothing about (zero unless
a cycle was cut short).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from loadmaster.kube.cluster import StepReport

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The HTTP Content-Type of the text exposition."""


def _exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Bucket bounds as component-base's ``ExponentialBuckets`` makes them."""
    return tuple(start * factor**i for i in range(count))


ATTEMPT_BUCKETS = _exponential(0.001, 2, 15)
"""kube-scheduler's buckets for attempt and algorithm latency: 1 ms to about 16 s."""
EXTENSION_POINT_BUCKETS = _exponential(0.0001, 2, 12)
"""kube-scheduler's buckets for one extension point (here Bind): 0.1 ms to about 200 ms."""
VICTIM_BUCKETS = _exponential(1, 2, 7)
BIND_SUCCESS = "Success"
BIND_ERROR = "Error"
"""The ``status`` label values of the Bind latency: the names of kube-scheduler's status codes
(``codes`` in ``staging/src/k8s.io/kube-scheduler/framework/interface.go``, formerly
``pkg/scheduler/framework/interface.go``) a bind can end with."""


class SchedulerMetrics:
    """Every series of one scheduler process, in a registry of its own (tests build as many as they like)."""

    def __init__(self, profile: str, lease_name: str = "loadmaster") -> None:
        self.profile = profile
        self.lease_name = lease_name
        self.registry = CollectorRegistry()
        r = self.registry
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=EXTENSION_POINT_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type: 'active' offered to the cycle and not decided, "
            "'backoff' in a gang rolled back, 'unschedulable' attempted and left waiting, 'gated' never "
            "offered (a gang short of members or of its PodGroup, or a pod that fits nowhere).",
            ["queue"],
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts", "Total preemption attempts in the cluster till now", registry=r
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            buckets=VICTIM_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )
        self.staleness = Gauge(
            "loadmaster_informer_staleness_seconds",
            "Seconds since the informer last heard from the API server (a list, an event or a bookmark).",
            ["resource"],
            registry=r,
        )
        self.rollbacks = Counter(
            "loadmaster_gang_rollbacks", "Gangs whose bind failed part-way and were rolled back.",
            ["profile"], registry=r,
        )  # fmt: skip
        self.walks_skipped = Counter(
            "loadmaster_backfill_walks_skipped",
            "Cycles that skipped their backfill walk, its interval_s not having passed since the last one "
            "(jobs then start in queue order only).",
            ["profile"],
            registry=r,
        )
        self.fairshare_usage = Gauge(
            "loadmaster_fairshare_usage_gpu_seconds",
            "GPU-seconds of the jobs that ended, per user and per group, decayed with the fair-share "
            "half-life: what fair-share orders read (kube/history.py).",
            ["level", "owner"],
            registry=r,
        )
        self.checkpoint_writes = Counter(
            "loadmaster_fairshare_checkpoint_writes",
            "Writes of the fair-share checkpoint ConfigMap by this replica, by result ('failed' counts "
            "failed reads too): the leader writes at most every 15 s when usage changed.",
            ["result"],
            registry=r,
        )
        self.checkpoint_last_write = Gauge(
            "loadmaster_fairshare_checkpoint_last_write_timestamp_seconds",
            "Unix time of this replica's last write of the fair-share checkpoint ConfigMap.",
            registry=r,
        )
        for result in ("written", "failed"):  # both exported from the start, so alerts can compare them
            self.checkpoint_writes.labels(result)
        self._checkpoint_counts = (0, 0)
        ProcessCollector(registry=r)
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending.labels(queue).set(0)
        self.leader.labels(lease_name).set(0)

    def observe_bind(self, seconds: float, ok: bool) -> None:
        """One Binding request's latency, labelled with its outcome.

        kube-scheduler observes the Bind extension point with the status code
        its bind plugins returned (``frameworkImpl.RunBindPlugins`` in
        ``pkg/scheduler/framework/runtime/framework.go``: ``status.Code().String()``):
        ``Success`` when the API accepted the Binding, ``Error`` when
        DefaultBinder got an API error, whatever the HTTP code
        (``plugins/defaultbinder/default_binder.go``: ``return AsStatus(err)``).
        """
        status = BIND_SUCCESS if ok else BIND_ERROR
        self.extension_point_duration.labels("Bind", status, self.profile).observe(seconds)

    def observe_leader(self, leader: bool) -> None:
        self.leader.labels(self.lease_name).set(1 if leader else 0)

    def observe_staleness(self, seconds: Mapping[str, float]) -> None:
        for resource, value in seconds.items():
            self.staleness.labels(resource).set(value)

    def observe_cycle(self, report: StepReport, binds: Mapping[str, bool]) -> None:
        """One step that ran the scheduler: attempts by result, pending pods by queue, preemptions,
        rollbacks, a skipped periodic backfill walk, and the fair-share usage the cycle read.

        ``binds`` maps each pod key the step tried to bind to whether the API accepted it.
        Pods of jobs the view kept from the cycle (``View.incomplete``) were
        not attempted: they are ``gated``.
        """
        view = report.view
        if view is None:
            return
        algorithm_s = report.algorithm_s
        self.algorithm_duration.observe(algorithm_s)
        results: dict[str, str] = {}
        gated = {key for job_id in view.incomplete for key in view.unbound.get(job_id, ())}
        for job_id in report.waiting:
            if job_id in view.incomplete:
                continue
            for key in view.unbound.get(job_id, ()):
                results[key] = "unschedulable"
        results.update({key: "scheduled" if ok else "error" for key, ok in binds.items()})
        for key, result in results.items():
            self.attempts.labels(result, self.profile).inc()
            seconds = algorithm_s + report.bind_s.get(key, 0.0)  # scheduling plus binding, as upstream
            self.attempt_duration.labels(result, self.profile).observe(seconds)
        offered = {key for keys in view.unbound.values() for key in keys} - gated
        backoff = {key for job_id in report.rolled_back for key in view.unbound.get(job_id, ())}
        waiting = {k for k, r in results.items() if r == "unschedulable"}
        self.pending.labels("unschedulable").set(len(waiting - backoff))
        self.pending.labels("backoff").set(len(backoff))
        self.pending.labels("gated").set(len(gated))
        self.pending.labels("active").set(len(offered - results.keys() - backoff))
        if report.evicted:
            self.preemption_attempts.inc()
            self.preemption_victims.observe(len(report.evicted))
        for _ in report.rolled_back:
            self.rollbacks.labels(self.profile).inc()
        if report.walks_skipped:
            self.walks_skipped.labels(self.profile).inc(report.walks_skipped)
        for key, gpu_s in view.snapshot.usage_gpu_s.items():
            level, _, owner = key.partition("/")
            self.fairshare_usage.labels(level, owner).set(gpu_s)

    def observe_checkpoint(self, saves: int, failures: int, last_saved_at_s: float | None) -> None:
        """The checkpoint's counts so far (:class:`~loadmaster.kube.checkpoint.UsageCheckpoint`)."""
        seen_saves, seen_failures = self._checkpoint_counts
        if saves > seen_saves:
            self.checkpoint_writes.labels("written").inc(saves - seen_saves)
        if failures > seen_failures:
            self.checkpoint_writes.labels("failed").inc(failures - seen_failures)
        self._checkpoint_counts = (max(saves, seen_saves), max(failures, seen_failures))
        if last_saved_at_s is not None:
            self.checkpoint_last_write.set(last_saved_at_s)

    def exposition(self) -> bytes:
        """The text exposition of every series (what ``/metrics`` answers)."""
        return generate_latest(self.registry)
