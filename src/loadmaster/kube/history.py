"""What the pods this scheduler ran have used, read from the cache: fair share and run-time history.

The simulator charges each job's GPU-seconds to its user and its group when the job ends, with
Slurm's half-life decay (:class:`~loadmaster.model.usage.UsageLedger`), and keeps each user's
last run times and time limits (``sim/cluster.py``, ``SimCluster.account``). Profiles read them
from the snapshot: ``multifactor``'s fair-share factor (``slurm``, ``nsml``), the ``learned``
order's user-share and history inputs, and backfill's per-user run-time predictor. Without them
a profile on Kubernetes would rank every user as if nobody had used anything, a different policy
from the one the simulator evaluated. :class:`JobHistory` keeps the same numbers from the pods
the informers cache, each pod charged once, by its UID:

* a pod runs from its ``status.startTime`` (set by the kubelet when it takes the pod; a pod bound
  and not yet taken has used nothing);
* a pod in a terminal phase (``Succeeded`` or ``Failed``) is charged its GPUs from then to its
  last container's ``state.terminated.finishedAt``; where no container reports one (a pod that
  failed before a container ran), to its conditions' last transition, else, if this scheduler saw
  it running, to when it first saw it ended; else (a restart, nothing to go by) not at all;
* a pod seen running that is gone (deleted, evicted, preempted, replaced) is charged up to when it
  was first found gone;
* a job whose pods all Succeeded adds its run time (first start to last end) and time limit to
  its user's history once (a failed or stopped run says little about how long the job takes, as
  a preempted run in the simulator).

Every replica keeps the ledger in memory; the leader also writes it to a ConfigMap, which a
replica reads before its first charge (``kube/checkpoint.py``: :meth:`JobHistory.saved` and
:meth:`JobHistory.restore`). What the checkpoint holds is named by a watermark (pods that ended by
then, by their containers' ``finishedAt``) and the UIDs of the pods and runs that ended after it
or whose end was read from conditions (which can move), so the finished pods still in the API
(Kubernetes keeps them until a Job's ``ttlSecondsAfterFinished`` or the pod garbage collector
removes them) are charged once, and those that ended after the save are charged. Without a
checkpoint, a restarted replica charges the finished pods still in the API at their own end
times, and the usage of pods already removed is lost.

Memory stays bounded: the ledger holds a number per user and group, the history at most
``history_jobs`` run times per user, and the records of running, charged and recorded pods only
those still in the cache.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from loadmaster.errors import LoadmasterError
from loadmaster.kube import translate as tr
from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot, TaskRequest
from loadmaster.model.mig import instance_milli, mig_model_for
from loadmaster.model.usage import HALF_LIFE_S, HISTORY_JOBS, PastUsage, UsageLedger

log = logging.getLogger(__name__)

_MIG_SLICES = re.compile(r"^(\d+)g\.")
MIG_COMPUTE_SLICES = 7
"""Compute slices of a MIG GPU whose model the node does not name (A100, H100 and H200 have 7)."""


@dataclass(frozen=True)
class SavedHistory:
    """What a checkpoint keeps of a :class:`JobHistory` (``kube/checkpoint.py`` writes and reads it).

    Pods and runs that ended at or before ``watermark_s`` are in ``past``; of those that ended
    after it, the ones named in ``charged`` and ``recorded`` are.
    """

    past: PastUsage
    """The usage per ``user/NAME`` and ``group/NAME`` as of the save, and the run-time history."""
    watermark_s: float
    charged: frozenset[str]
    """UIDs of the pods charged that ended after the watermark."""
    recorded: Mapping[str, frozenset[str]]
    """Job id -> the UIDs of its succeeded run in the history, for runs that ended after the watermark."""


@dataclass(frozen=True, slots=True)
class _PodRun:
    """A pod that started: what charging it needs."""

    key: str
    start_s: float
    gpus: float
    user: str
    group: str


@dataclass(frozen=True, slots=True)
class _Charge:
    run: _PodRun
    end_s: float
    how: str

    @property
    def gpu_s(self) -> float:
        return self.run.gpus * max(self.end_s - self.run.start_s, 0.0)


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
        self._running: dict[str, _PodRun] = {}
        """Pods seen started and not ended, by UID."""
        self._charged: dict[str, tuple[float, bool]] = {}
        """UID -> end of each ended pod already charged (or found not chargeable: the time it was seen)
        that is still cached, and whether that end is firm (its containers' finishedAt, or nothing was
        charged): a checkpoint names the others whatever their end."""
        self._recorded: dict[str, tuple[frozenset[str], float, bool]] = {}
        """Job id -> the UIDs of the succeeded run put in the history (a later run has new UIDs), its
        end, and whether that end is every pod's containers' finishedAt (which cannot move)."""
        self.watermark_s = -math.inf
        """Restored from a checkpoint (:meth:`restore`): pods and runs that ended at or before this are
        in the restored numbers already."""
        self.observed = False
        self.changes = 0
        """Counts charges, recorded runs and restores: a checkpoint is written when it moved."""
        self._unreadable: set[str] = set()
        """UIDs of pods whose request could not be read (warned once)."""

    def observe(
        self,
        pods: Mapping[str, tr.Obj],
        scheduler_names: Collection[str],
        now: float,
        *,
        nodes: Mapping[str, tr.Obj] | None = None,
        default_time_limit_s: float = tr.DEFAULT_TIME_LIMIT_S,
        requests: Callable[[tr.Obj], TaskRequest] = tr.pod_request,
    ) -> int:
        """Charge what ended since the last call (see the module); how many pods were charged."""
        self.observed = True
        charges: list[_Charge] = []
        running: dict[str, _PodRun] = {}
        ended: set[str] = set()
        jobs: dict[str, list[tr.Obj]] = defaultdict(list)
        for pod in pods.values():
            if not tr.is_ours(pod, scheduler_names):
                continue
            jobs[tr.job_id_of(pod)].append(pod)
            uid, stamp = _uid(pod), pod.get("status", {}).get("startTime")
            if not tr.node_name_of(pod) or not stamp:
                continue  # not taken by a kubelet yet: nothing used
            run = self._running.get(uid)
            if tr.phase_of(pod) not in tr.TERMINAL_PHASES:
                run = run or self._read(pod, uid, nodes or {}, requests)
                if run is not None:
                    running[uid] = run
                continue
            ended.add(uid)
            if uid in self._charged:
                continue
            finished = _finished_at(pod)
            if finished is not None and finished <= self.watermark_s:
                self._charged[uid] = (finished, True)  # charged before the checkpoint restored
                continue
            end = finished if finished is not None else _conditions_end(pod)
            if end is None and run is not None:
                end = now  # seen running: it ended since
            run = run or self._read(pod, uid, nodes or {}, requests)
            charged = run is not None and end is not None
            # Charged now, or never (nothing says when it ended). An end read from anything but the
            # containers' finishedAt can move later (a condition added), so such a pod is named in a
            # checkpoint whatever its end: the watermark alone would not keep a successor from it.
            self._charged[uid] = (now if end is None else end, finished is not None or not charged)
            if run is not None and end is not None:
                charges.append(_Charge(run, end, tr.phase_of(pod)))
        charges += [
            _Charge(run, max(now, run.start_s), "gone while running")
            for uid, run in self._running.items()
            if uid not in running and uid not in ended
        ]
        charges.sort(key=lambda c: (c.end_s, c.run.key))
        for charge in charges:
            self._charge(charge)
        self._history(jobs, default_time_limit_s)
        self._running = running
        self._charged = {uid: kept for uid, kept in self._charged.items() if uid in ended}
        self._unreadable &= {_uid(p) for members in jobs.values() for p in members}
        if charges:  # one line a step (a restart may charge thousands of finished pods at once)
            log.info(
                "fair-share usage charged for %d pods that ended, %.1f GPU-hours",
                len(charges),
                sum(c.gpu_s for c in charges) / 3600,
                extra={"pods": len(charges)},
            )
        return len(charges)

    def saved(self, now: float, grace_s: float) -> SavedHistory:
        """What a checkpoint taken at ``now`` keeps: the numbers, and which pods and runs they hold.

        The watermark is ``grace_s`` before ``now`` (never earlier than the one restored): a pod
        that ended before it and is not charged yet (its end not seen by the informers within the
        grace) would not be charged by a successor either.
        """
        watermark = max(now - grace_s, self.watermark_s)
        return SavedHistory(
            past=self.past(now),
            watermark_s=watermark,
            charged=frozenset(
                uid for uid, (end, firm) in self._charged.items() if end > watermark or not firm
            ),
            recorded={
                job: uids for job, (uids, end, firm) in self._recorded.items() if end > watermark or not firm
            },
        )

    def past(self, now: float) -> PastUsage:
        """The usage as of ``now`` and the run-time history, as a simulation can start from them."""
        return PastUsage(
            now, dict(self.usage.view(now)), dict(self.recent_runtimes), dict(self.recent_limits)
        )

    def restore(self, saved: SavedHistory) -> None:
        """Start from ``saved`` (before the first :meth:`observe`: a history that charged anything
        would count those pods twice)."""
        if self.observed:
            raise RuntimeError("a history is restored before it observes anything")
        past = saved.past
        self.usage = past.ledger(self.usage.half_life_s)
        self.recent_runtimes, self.recent_limits = past.recent(self.history_jobs)
        self._charged = dict.fromkeys(saved.charged, (past.as_of_s, False))
        self._recorded = {job: (uids, past.as_of_s, False) for job, uids in saved.recorded.items()}
        self.watermark_s = saved.watermark_s
        self.changes += 1

    def applied(self, snapshot: ClusterSnapshot, now: float) -> ClusterSnapshot:
        """``snapshot`` carrying this history: usage as of ``now``, run times and limits."""
        return replace(
            snapshot,
            usage_gpu_s=self.usage.view(now),
            recent_runtimes_s=dict(self.recent_runtimes),
            recent_limits_s=dict(self.recent_limits),
        )

    def _read(
        self, pod: tr.Obj, uid: str, nodes: Mapping[str, tr.Obj], requests: Callable[[tr.Obj], TaskRequest]
    ) -> _PodRun | None:
        """The pod's run, or None (warned once) where its request cannot be read."""
        try:
            request = requests(pod)
        except LoadmasterError as error:
            if uid not in self._unreadable:
                self._unreadable.add(uid)
                log.warning("fair share: pod %s not charged: %s", tr.key_of(pod), error)
            return None
        user, group = tr.owners_of(pod)
        start = tr.timestamp_s(pod.get("status", {}).get("startTime"))
        return _PodRun(tr.key_of(pod), start, _gpus(request, pod, nodes), user, group)

    def _charge(self, charge: _Charge) -> None:
        run = charge.run
        self.changes += 1
        self.usage.charge(f"user/{run.user}", charge.gpu_s, charge.end_s)
        self.usage.charge(f"group/{run.group}", charge.gpu_s, charge.end_s)
        log.debug(
            "fair-share usage charged: pod %s %s, %.0f GPU-seconds to user %s and group %s",
            run.key,
            charge.how,
            charge.gpu_s,
            run.user,
            run.group,
            extra={"pod": run.key, "gpu_s": charge.gpu_s, "user": run.user, "group": run.group},
        )

    def _history(self, jobs: Mapping[str, list[tr.Obj]], default_time_limit_s: float) -> None:
        """Each job whose pods all Succeeded, once per run: its run time and limit, in end order."""
        done: list[tuple[float, str, str, float, float]] = []
        for job_id, members in jobs.items():
            if not all(
                tr.phase_of(p) == "Succeeded" and p.get("status", {}).get("startTime") for p in members
            ):
                continue  # most jobs, at every step: still running or waiting
            uids = frozenset(_uid(p) for p in members)
            kept = self._recorded.get(job_id)
            if kept is not None and uids <= kept[0]:
                continue  # this run, recorded already (its pods may be going one by one)
            ends = [_ended_s(p) for p in members]
            if any(end is None for end in ends):
                continue  # no end to read: no run time to keep
            start = min(tr.timestamp_s(p["status"]["startTime"]) for p in members)
            end = max(e for e in ends if e is not None)
            firm = all(_finished_at(p) is not None for p in members)
            self._recorded[job_id] = (uids, end, firm)
            if firm and end <= self.watermark_s:
                continue  # in the restored history already
            first = min(members, key=lambda p: str(p["metadata"]["name"]))
            limit = float(first.get("spec", {}).get("activeDeadlineSeconds") or default_time_limit_s)
            done.append((end, job_id, tr.owners_of(first)[0], max(end - start, 0.0), limit))
        keep = self.history_jobs
        self.changes += len(done)
        for _, _, user, run_s, limit_s in sorted(done):
            self.recent_runtimes[user] = (*self.recent_runtimes.get(user, ()), run_s)[-keep:]
            self.recent_limits[user] = (*self.recent_limits.get(user, ()), limit_s)[-keep:]
        self._recorded = {k: v for k, v in self._recorded.items() if k in jobs}


def _uid(pod: tr.Obj) -> str:
    """The pod's UID (a new pod of the same name has a new one); its key where the API gave none."""
    return str(pod["metadata"].get("uid") or tr.key_of(pod))


def _ended_s(pod: tr.Obj) -> float | None:
    """When a terminal pod ended: its containers' latest ``finishedAt``, else its conditions' latest
    ``lastTransitionTime`` (Ready turns False when it ends), else None."""
    finished = _finished_at(pod)
    return finished if finished is not None else _conditions_end(pod)


def _finished_at(pod: tr.Obj) -> float | None:
    """Its containers' latest ``state.terminated.finishedAt`` (set once, by the kubelet), else None."""
    ends = [
        tr.timestamp_s(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in pod.get("status", {}).get("containerStatuses") or ()
    ]
    known = [e for e in ends if e > 0]
    return max(known) if known else None


def _conditions_end(pod: tr.Obj) -> float | None:
    """Its conditions' latest ``lastTransitionTime``, else None (a later condition can move it)."""
    ends = [
        tr.timestamp_s(c.get("lastTransitionTime")) for c in pod.get("status", {}).get("conditions") or ()
    ]
    known = [e for e in ends if e > 0]
    return max(known) if known else None


def _gpus(request: TaskRequest, pod: tr.Obj, nodes: Mapping[str, tr.Obj]) -> float:
    """GPUs the pod holds: whole GPUs and shares as requested; a MIG instance its compute slices over
    its GPU model's (the node's ``nvidia.com/gpu.product``, as the simulator counts MIG time)."""
    if request.mig_profile is None:
        return request.gpu_milli / MILLI_PER_GPU
    node = nodes.get(tr.node_name_of(pod) or "")
    product = ((node or {}).get("metadata", {}).get("labels") or {}).get(tr.PRODUCT_LABEL, "")
    model = mig_model_for(str(product))
    if model is not None and model.has(request.mig_profile):
        return instance_milli(model, request.mig_profile) / MILLI_PER_GPU
    found = _MIG_SLICES.match(request.mig_profile)
    slices = int(found.group(1)) if found else 1
    return (MILLI_PER_GPU * slices // MIG_COMPUTE_SLICES) / MILLI_PER_GPU
