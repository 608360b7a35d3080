"""Extension points: the small interfaces a plugin implements.

A plugin subclasses :class:`Plugin` and one or more extension-point classes,
and implements only their methods. Its arguments are a dataclass named
``Args`` with defaults and docstrings. The framework calls the points in this
order for each job: ``order`` (sort the queue), ``admit`` (may it be
considered now), ``filter`` and ``score`` (which nodes, best first),
``place_gang`` (topology of the whole gang), ``choose_gpus`` (which GPUs of
the node a task takes), ``permit`` (may a partial or whole placement be
committed), and, for a job left waiting, ``reserve``; ``select_victims``
serves preemption.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from loadmaster.model import ClusterSnapshot, Job, NodeTable, PendingJob, RunningJob, TaskRequest
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import Status

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class NoArgs:
    """The plugin takes no arguments."""


@dataclass(eq=False)
class CycleContext:
    """Everything a plugin may read in one cycle. ``data`` holds per-cycle state keyed by plugin name."""

    now: float
    rng: np.random.Generator
    snapshot: ClusterSnapshot
    state: WorkingState
    data: dict[str, object] = field(default_factory=dict)

    @contextmanager
    def viewing(self, state: WorkingState) -> Iterator[None]:
        """Let plugins see ``state`` (a shadow or future view) instead of the cycle's state, for a while."""
        saved, self.state = self.state, state
        try:
            yield
        finally:
            self.state = saved


class Plugin:
    """Base of every plugin: a registered name and a typed ``Args`` dataclass."""

    name: ClassVar[str] = ""
    Args: ClassVar[type] = NoArgs

    def __init__(self, args: object | None = None) -> None:
        self.args = args if args is not None else self.Args()


class OrderPlugin(Plugin):
    """``order``: a sort key for the queue; lower keys go first.

    Keys of several order plugins are compared in profile order. ``strict``
    plugins make a job that cannot start block every later job of its queue.
    ``follows_submission_order`` says the key never reorders jobs that are
    already in submission order, which lets the framework skip the sort.
    """

    strict: bool = False
    commits_head: bool = False
    """True when the job chosen as its queue's head stays first until it starts, even if a job with
    a lower key arrives meanwhile (the scheduler remembers it between cycles; RLScheduler's loop)."""
    follows_submission_order: bool = False
    splits_queues: bool = False
    """True for a plugin whose ``lane`` splits queues (multi-queue)."""

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        raise NotImplementedError

    def order_keys(self, jobs: Sequence[Job], ctx: CycleContext) -> list[tuple[float | str, ...]]:
        """``order_key`` of each job, in order. A plugin may compute them together (vectorised)
        where one key per call costs too much on a queue of thousands; the keys must be equal."""
        return [self.order_key(job, ctx) for job in jobs]

    def order_prefixes(
        self, jobs: Sequence[Job], ctx: CycleContext
    ) -> list[tuple[float | str, ...]] | FloatArray | None:
        """``order_key`` of each job less its last two parts, for a plugin whose every key ends with
        the job's ``(submit_s, id)``; None otherwise (the default).

        Such keys order a queue that is already in submission order by the prefix alone, with ties
        left in place (a stable sort): the framework then sorts short keys, and a plugin may give
        equal prefixes as one shared tuple (per owner, say) rather than a new tuple per job. A
        prefix of one float (no NaN) may come as one array for all jobs, sorted in one C call.
        """
        return None

    def lane(self, job: Job) -> str | None:
        """The queue a job competes in for blocking, when this plugin splits queues (else None)."""
        return None

    wakes: bool = False
    """True for a plugin whose keys change with time alone (a running job's attained service
    crossing a queue threshold): a driver then asks :meth:`wake_s` when to run a cycle again."""

    def wake_s(self, snapshot: ClusterSnapshot, now: float) -> float:
        """The next time after ``now`` at which a key changes with no other event (inf: never)."""
        return math.inf


class AdmitPlugin(Plugin):
    """``admit``: may this job start now (quotas, gates).

    Asked for each job right before it is placed, so it sees what earlier
    binds of the cycle used; ``on_bind`` tells it about each committed bind.
    """

    def admit(self, pending: PendingJob, ctx: CycleContext) -> Status:
        raise NotImplementedError

    def on_bind(self, job: Job, gpus: float, ctx: CycleContext) -> None:
        """``gpus`` of ``job`` were just bound in this cycle."""

    def admit_key(self, pending: PendingJob) -> Hashable | None:
        """What the verdict depends on besides the binds of the cycle, or None (ask every time).

        Jobs with equal keys get equal verdicts from :meth:`admit` between two
        binds of a cycle (and a plugin's verdicts may not depend on evictions),
        so the framework asks once per key and bind: a queue of thousands
        asks a few questions. The key must be a function of the pending job
        alone (the framework keeps it across cycles for a job without bound tasks).
        """
        return None


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Nodes a plugin allows, and why none are when the mask is empty."""

    mask: BoolArray
    reason: str = ""


class FilterPlugin(Plugin):
    """``filter``: which nodes may host tasks of this job, beyond resource fit.

    A filter decides from the job and the cluster's fixed properties (and
    per-cycle data it computes itself), never from free resources, which
    change within a cycle: its answer is kept for the whole cycle per shape.

    ``memo_key`` must return every property of the job the filter depends on
    other than its shape (pool, type, selector, request), so that the
    framework may skip jobs of a shape that already failed in the cycle.
    """

    reads_nodes_only: ClassVar[bool] = False
    """True for a filter whose answer reads only the job and the node table (``ctx.state.nodes``):
    no time, no random draws, nothing else of the snapshot. A strict FIFO cycle that bound nothing
    may then be answered as the last one was when nothing it read changed (``scheduling.repeat``)."""
    marks_cycle: ClassVar[bool] = False
    """True for a filter that leaves a note in ``ctx.data`` for later steps of the cycle when it runs
    (cuda-compat: a shortfall then names the drivers it counted). Its answers are then not kept
    from one cycle to the next (``Scheduler``), since a cycle that did not run it would lack the note."""

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        raise NotImplementedError

    def memo_key(self, job: Job) -> Hashable:
        return ()


class ScorePlugin(Plugin):
    """``score``: a number per node, higher is better; weighted and summed across plugins.

    Scores are read only where nodes fit, so a plugin need not mask them.
    """

    pure: ClassVar[bool] = False
    """True for a plugin whose score reads only ``ctx.state`` and the job (no random draws, no
    ``ctx.data``): a placement that fails may then be remembered rather than tried again."""

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        raise NotImplementedError


class GpuChoicePlugin(Plugin):
    """``choose_gpus``: which GPUs of the chosen node one task takes.

    Without one, a task takes the lowest wholly free GPUs, or the GPU whose
    free share fits a fractional request best (``fit.choose_gpus``). Every
    placement path asks the profile's first such plugin (a score plugin of
    the sharing family, say): the scheduler's placement, and drivers that
    place tasks themselves (the FGD validation). It must return GPUs of
    ``node`` with room for ``request`` in ``ctx.state``.
    """

    def choose_gpus(self, job: Job, request: TaskRequest, node: int, ctx: CycleContext) -> tuple[int, ...]:
        raise NotImplementedError


class PlaceGangPlugin(Plugin):
    """``place_gang``: choose the node for the next tasks of a gang (topology).

    Given how many tasks each node can still take (``capacity``), the tasks
    left, the nodes the gang already uses and the combined scores, return the
    node index for the next batch, or -1 when no node can take a task.
    """

    def choose_node(
        self,
        capacity: npt.NDArray[np.int64],
        remaining: int,
        used: Sequence[int],
        scores: FloatArray,
        nodes: NodeTable,
    ) -> int:
        raise NotImplementedError


class PermitPlugin(Plugin):
    """``permit``: may the tasks placed so far be committed (gang: all or nothing).

    A permit is monotone in the tasks placed: refusing ``n``, it refuses fewer. The allocation
    relies on it to fail a gang at once when its nodes cannot hold the tasks a permit needs.
    """

    def permit(self, pending: PendingJob, placed: int) -> Status:
        raise NotImplementedError

    def permits(self, pending: PendingJob, placed: int) -> bool:
        """Whether :meth:`permit` accepts, without the reason (a plugin may answer it more cheaply)."""
        return self.permit(pending, placed).ok


class ReservePlugin(Plugin):
    """``reserve``: which waiting jobs hold a reservation, and how long jobs are expected to run.

    Used by the ``backfill`` action: a job that cannot start now may reserve
    its earliest start, computed from running jobs' expected ends; later jobs
    start now only where they cannot delay a reservation.

    Not Kubernetes' Reserve: there, Reserve (with Unreserve) runs for a pod that
    has been given a node, to claim node-local resources before binding and to
    undo that claim if a later step fails (kubernetes.io/docs/concepts/
    scheduling-eviction/scheduling-framework). Here ``reserve`` is a backfill
    policy for jobs that got no node: a time-slot reservation in the future, as
    in Slurm's and Maui's backfill; commit and rollback of a placement are the
    working state's gang transaction (:class:`~loadmaster.scheduling.state.WorkingState`).
    """

    max_starving_per_cycle: int = 0
    """Most starving jobs the ``backfill`` action visits first in a cycle."""
    ends_before_reservations: bool = False
    """Start a job now only if its expected run ends strictly before every reservation begins
    (no use of GPUs a reservation leaves spare); False: EASY's shadow rule."""
    backfill_by_submission: bool = False
    """Once a reservation is made, visit the rest of the queue in submission order, not queue order."""
    fixed_running_estimates: bool = False
    """True when :meth:`running_estimate_s` depends on the running job alone (not on the time or the
    cluster): the scheduler then keeps running jobs' expected ends from cycle to cycle."""
    reservations_per_lane: int = 1
    """Most jobs of one queue lane that reserve in a cycle (besides starving ones): each is a search of
    the running jobs' ends, the dearest step of a backfilling cycle. Read to guess a profile's cost."""
    pass_interval_s: float | None = None
    """Least time between two backfill walks (Slurm's ``bf_interval``); the cycles in between start
    jobs in queue order up to the first that cannot start in each lane. None: a walk every cycle."""
    max_jobs_per_walk: int | None = None
    """Most waiting jobs one backfill walk tries (Slurm's ``bf_max_job_test``); the others wait
    untried, with one shared status (``CycleResult.untested``). None: every waiting job."""

    def wants_reservation(self, pending: PendingJob, held: int, ctx: CycleContext) -> bool:
        """Whether ``pending`` gets a reservation, ``held`` having been made in its queue lane this cycle."""
        raise NotImplementedError

    def starving(self, pending: PendingJob, ctx: CycleContext) -> bool:
        """Whether ``pending`` has waited so long that it is visited first and always reserves."""
        return False

    def estimate_s(self, job: Job, ctx: CycleContext) -> float:
        """Expected run time of ``job`` (its requested time limit unless the plugin predicts better)."""
        raise NotImplementedError

    def running_estimate_s(self, running: RunningJob, ctx: CycleContext) -> float:
        """Expected whole run time of a job that has been running since ``running.start_s``: what
        reservations plan its end with (by default :meth:`estimate_s`, however long it has run)."""
        return self.estimate_s(running.job, ctx)


class VictimPlugin(Plugin):
    """``select_victims``: which running jobs may be preempted so that ``pending`` can start.

    Returns the eligible jobs, most preferred victim first; the ``preempt``
    action then takes the fewest of them that make room, and evicts each
    gang whole. An empty result means ``pending`` may not preempt.
    """

    keyed: ClassVar[bool] = False
    """Whether :meth:`victims_key` gives keys (a plugin that sets it overrides that method)."""

    def select_victims(
        self, pending: PendingJob, running: Sequence[RunningJob], ctx: CycleContext
    ) -> Sequence[RunningJob]:
        raise NotImplementedError

    def victims_key(self, pending: PendingJob) -> Hashable | None:
        """What :meth:`select_victims` reads of ``pending``, where that is all it reads besides the
        running list and the cluster (no bind or eviction in between): jobs with equal keys get
        the same victims, so the ``preempt`` action asks once per key. None (the default): ask
        for every job."""
        return None
