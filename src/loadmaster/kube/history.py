"""What the jobs this scheduler ran have used, read from their pods: fair share and run-time history.

The simulator charges each job's GPU-seconds to its user and its group when the job ends, with
Slurm's half-life decay (:class:`~loadmaster.model.usage.UsageLedger`), and keeps each user's
last run times and time limits (``sim/cluster.py``, ``SimCluster.account``). Profiles read them
from the snapshot: ``multifactor``'s fair-share factor (``slurm``, ``nsml``), the ``learned``
order's user-share and history inputs, and backfill's per-user run-time predictor. Without them
a profile on Kubernetes would rank every user as if nobody had used anything, a different policy
from the one the simulator evaluated. :class:`JobHistory` keeps the same numbers from the pods
the informers cache:

* a job whose pods have all finished (``status.phase`` Succeeded or Failed, the kubelet's
  terminal phases) is charged once: its GPUs times the time from its first pod's
  ``status.startTime`` to its last container's ``state.terminated.finishedAt`` (where no
  container reports one, the time it was first seen finished), at that end time;
* a job whose pods all Succeeded also adds its run time and time limit to its user's history
  (a failed or stopped run says little about how long the job takes, as a preempted run in the
  simulator);
* a job seen running that disappears (deleted, evicted, preempted) is charged up to the time
  its pods were first found gone, without history.

The ledger lives in memory. After a restart or a change of leader, the finished pods still in
the API (Kubernetes keeps them until a Job's ``ttlSecondsAfterFinished`` or the pod garbage
collector removes them) are charged again at their own end times, so the usage of every job whose
pods remain is rebuilt as it was; the usage of jobs whose pods are gone, and of runs stopped
while no replica watched, is lost (Slurm keeps usage in its accounting database; docs/kubernetes.md
lists the difference).

Memory stays bounded: the ledger holds a number per user and group, the history at most
``history_jobs`` run times per user, and the record of charged jobs only those whose pods are
still in the cache.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from loadmaster.kube import translate as tr
from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot
from loadmaster.model.usage import HALF_LIFE_S, HISTORY_JOBS, UsageLedger

log = logging.getLogger(__name__)

_TERMINAL = frozenset({"Succeeded", "Failed"})
_MIG_SLICES = re.compile(r"^(\d+)g\.")
MIG_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200): a ``3g`` instance is charged 3/7 of one."""


@dataclass(frozen=True, slots=True)
class _Run:
    """A job seen running: what charging it needs if it disappears."""

    start_s: float
    gpus: float
    user: str
    group: str
    stamps: tuple[int, str]
    """Pods bound and their earliest start stamp when it was last read: a gang binding more
    members, or a job whose pods were replaced, is read again."""


Outcome = Literal["succeeded", "failed", "gone while running"]
GONE: Outcome = "gone while running"


@dataclass(frozen=True, slots=True)
class _Ended:
    """A run to charge: its GPUs from ``start_s`` to ``end_s``, and how it ended."""

    job_id: str
    start_s: float
    end_s: float
    gpus: float
    user: str
    group: str
    limit_s: float
    outcome: Outcome


class JobHistory:
    """Decayed GPU-seconds per user and group, and each user's recent run times (see the module)."""

    def __init__(self, half_life_s: float = HALF_LIFE_S, history_jobs: int = HISTORY_JOBS) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        if history_jobs < 1:
            raise ValueError(f"history_jobs must be >= 1, got {history_jobs}")
        self.usage = UsageLedger(half_life_s)
        self.history_jobs = history_jobs
        self.recent_runtimes: dict[str, tuple[float, ...]] = {}
        self.recent_limits: dict[str, tuple[float, ...]] = {}
        """The time limits of the jobs of ``recent_runtimes``, in the same order."""
        self._running: dict[str, _Run] = {}
        self._charged: set[tuple[str, float]] = set()
        """(job id, start) of the finished jobs already charged whose pods are still cached."""
        self._first_seen_ended: dict[tuple[str, float], float] = {}
        """When a finished job without a container end time was first seen so."""

    def observe(
        self,
        pods: Mapping[str, tr.Obj],
        scheduler_names: Collection[str],
        now: float,
        default_time_limit_s: float = tr.DEFAULT_TIME_LIMIT_S,
    ) -> int:
        """Charge what ended since the last call (see the module); how many jobs were charged."""
        jobs: dict[str, list[tr.Obj]] = defaultdict(list)
        for pod in pods.values():
            if tr.is_ours(pod, scheduler_names):
                jobs[tr.job_id_of(pod)].append(pod)
        running: dict[str, _Run] = {}
        ended: list[_Ended] = []
        gone: list[_Ended] = []
        present: set[tuple[str, float]] = set()
        for job_id, members in jobs.items():
            bound = [p for p in members if tr.node_name_of(p)]
            if not bound:
                continue
            if all(_phase(p) in _TERMINAL for p in members):
                start = _start_s(bound)
                key = (job_id, start)
                present.add(key)
                if key not in self._charged:
                    ended.append(
                        self._ended(job_id, members, start, now, default_limit_s=default_time_limit_s)
                    )
                continue
            # Read once per run, not at every step: the same bound pods with the same start stamps
            # (RFC 3339 UTC stamps of one form, so the earliest is the least string) are the same run.
            stamps = (len(bound), min(_start_stamp(p) for p in bound))
            before = self._running.get(job_id)
            if before is not None and before.stamps == stamps:
                running[job_id] = before
                continue
            start = _start_s(bound)
            if before is not None and before.start_s != start:  # its pods were replaced: a new run
                gone.append(_gone(job_id, before, now))
            job = tr.job_from(job_id, members, None, default_time_limit_s)
            running[job_id] = _Run(start, _gpus(bound), job.user, job.group, stamps)
        finished = {e.job_id for e in ended}
        gone += [
            _gone(job_id, run, now)
            for job_id, run in self._running.items()
            if job_id not in running and job_id not in finished
        ]
        charged = sorted([*ended, *gone], key=lambda e: (e.end_s, e.job_id))
        for item in charged:
            self._charge(item)
        if charged:  # one line a step (a restart may charge thousands of finished jobs at once)
            log.info(
                "fair-share usage charged for %d jobs that ended (%d succeeded), %.1f GPU-hours",
                len(charged),
                sum(e.outcome == "succeeded" for e in charged),
                sum(e.gpus * (e.end_s - e.start_s) for e in charged) / 3600,
                extra={"jobs": len(charged)},
            )
        self._charged = (self._charged | {(e.job_id, e.start_s) for e in ended}) & present
        self._first_seen_ended = {k: v for k, v in self._first_seen_ended.items() if k in present}
        self._running = running
        return len(ended) + len(gone)

    def applied(self, snapshot: ClusterSnapshot, now: float) -> ClusterSnapshot:
        """``snapshot`` carrying this history: usage as of ``now``, run times and limits."""
        return replace(
            snapshot,
            usage_gpu_s=self.usage.view(now),
            recent_runtimes_s=dict(self.recent_runtimes),
            recent_limits_s=dict(self.recent_limits),
        )

    def _ended(
        self, job_id: str, members: Sequence[tr.Obj], start: float, now: float, *, default_limit_s: float
    ) -> _Ended:
        job = tr.job_from(job_id, members, None, default_limit_s)
        bound = [p for p in members if tr.node_name_of(p)]
        known = [f for f in map(_finished_s, bound) if f is not None]
        # No container says when it ended: when this scheduler first saw it ended.
        end = max(known) if known else self._first_seen_ended.setdefault((job_id, start), now)
        outcome: Outcome = "succeeded" if all(_phase(p) == "Succeeded" for p in members) else "failed"
        return _Ended(
            job_id, start, max(end, start), _gpus(bound), job.user, job.group, job.time_limit_s, outcome
        )

    def _charge(self, item: _Ended) -> None:
        gpu_s = item.gpus * (item.end_s - item.start_s)
        self.usage.charge(f"user/{item.user}", gpu_s, item.end_s)
        self.usage.charge(f"group/{item.group}", gpu_s, item.end_s)
        if item.outcome == "succeeded":
            keep = self.history_jobs
            past = self.recent_runtimes.get(item.user, ())
            self.recent_runtimes[item.user] = (*past, item.end_s - item.start_s)[-keep:]
            limits = self.recent_limits.get(item.user, ())
            self.recent_limits[item.user] = (*limits, item.limit_s)[-keep:]
        log.debug(
            "fair-share usage charged: %s %s, %.0f GPU-seconds to user %s and group %s",
            item.job_id,
            item.outcome,
            gpu_s,
            item.user,
            item.group,
            extra={"job": item.job_id, "gpu_s": gpu_s, "user": item.user, "group": item.group},
        )


def _gone(job_id: str, run: _Run, now: float) -> _Ended:
    """``run`` charged up to ``now``, when its pods were found gone (no end time to read)."""
    return _Ended(job_id, run.start_s, max(now, run.start_s), run.gpus, run.user, run.group, 0.0, GONE)


def _phase(pod: tr.Obj) -> str:
    return str(pod.get("status", {}).get("phase", "Pending"))


def _start_stamp(pod: tr.Obj) -> str:
    return str(pod.get("status", {}).get("startTime") or pod["metadata"].get("creationTimestamp") or "")


def _start_s(bound: Sequence[tr.Obj]) -> float:
    """The earliest ``status.startTime`` of the bound pods, else their earliest creation time."""
    started = [tr.timestamp_s(p.get("status", {}).get("startTime")) for p in bound]
    known = [s for s in started if s > 0]
    if known:
        return min(known)
    return min(tr.timestamp_s(p["metadata"].get("creationTimestamp")) for p in bound)


def _finished_s(pod: tr.Obj) -> float | None:
    """The latest ``finishedAt`` of the pod's terminated containers, or None if none reports one."""
    ends = [
        tr.timestamp_s(((status.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for status in pod.get("status", {}).get("containerStatuses") or ()
    ]
    known = [e for e in ends if e > 0]
    return max(known) if known else None


def _gpus(bound: Sequence[tr.Obj]) -> float:
    """GPUs the bound pods hold: whole GPUs and shares as requested, a MIG instance by its slices."""
    milli = 0
    for pod in bound:
        request = tr.pod_request(pod)
        if request.mig_profile is not None:
            found = _MIG_SLICES.match(request.mig_profile)
            slices = int(found.group(1)) if found else 1
            milli += slices * MILLI_PER_GPU // MIG_COMPUTE_SLICES
        else:
            milli += request.gpu_milli
    return milli / MILLI_PER_GPU
