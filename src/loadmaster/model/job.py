"""Jobs as gangs of tasks, and where their tasks were placed."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

from loadmaster.errors import ModelError
from loadmaster.model.constraints import NodeAffinity, Toleration
from loadmaster.model.cuda import CudaVersion
from loadmaster.model.mig import MigSlot
from loadmaster.model.resources import MILLI_PER_GPU, TaskRequest

SIZE_CLASSES: tuple[tuple[str, float, float], ...] = (
    ("<1", 0.0, 1.0),
    ("1", 1.0, 2.0),
    ("2", 2.0, 4.0),
    ("4", 4.0, 8.0),
    ("8", 8.0, 16.0),
    ("16-32", 16.0, 64.0),
    ("64+", 64.0, float("inf")),
)
"""Job size classes by total GPUs, as (label, lower bound inclusive, upper bound exclusive)."""


def size_class(gpus: float) -> str:
    """The size-class label for a job that uses ``gpus`` GPUs in total."""
    for label, low, high in SIZE_CLASSES:
        if low <= gpus < high:
            return label
    return SIZE_CLASSES[-1][0]


@dataclass(frozen=True, slots=True)
class Job:
    """A job as its owner submitted it: a gang of identical tasks.

    The job runs once ``min_available`` of its ``tasks`` are placed (all of
    them unless said otherwise). ``time_limit_s`` is the run time the user
    asked for; the real duration is not part of the job, because a scheduler
    never knows it: only the simulator does (see :class:`TraceJob`).
    ``pool`` and ``resource_type`` restrict where it may run (None: anywhere);
    ``node_selector`` must match node labels exactly. ``cuda`` is the CUDA
    release its image was built with (None: not declared), ``cuda_compat``
    whether the image carries NVIDIA's cuda-compat package (see
    :mod:`loadmaster.model.cuda`). ``tolerations`` and ``affinity`` are
    Kubernetes' (the ``taint-toleration`` and ``node-affinity`` plugins apply
    them). ``priority_value``, when set, is the job's priority as
    a number resolved by the system it came from (a Kubernetes PriorityClass):
    the priority plugins then use it instead of their class table.
    ``may_preempt`` False: the job never evicts others (``preemptionPolicy: Never``).
    ``scheduler_name`` names the profile that schedules the job where one
    process runs several (Kubernetes ``spec.schedulerName``); None: the only one.
    ``reclaim_first`` marks an interactive session: the idle-reclaim policy
    takes it sooner than a training job (``ReclaimPolicy.first_idle_after_s``).
    """

    id: str
    user: str
    group: str
    submit_s: float
    tasks: int
    request: TaskRequest
    time_limit_s: float
    queue: str = "default"
    min_available: int = 0
    priority_class: str = "normal"
    priority: int = 0
    pool: str | None = None
    resource_type: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    cuda: CudaVersion | None = None
    cuda_compat: bool = False
    tolerations: tuple[Toleration, ...] = ()
    affinity: NodeAffinity | None = None
    priority_value: int | None = None
    may_preempt: bool = True
    scheduler_name: str | None = None
    reclaim_first: bool = False

    def __post_init__(self) -> None:
        if self.tasks < 1:
            raise ModelError(f"job {self.id}: tasks must be >= 1, got {self.tasks}")
        if self.min_available == 0:
            object.__setattr__(self, "min_available", self.tasks)
        if not 1 <= self.min_available <= self.tasks:
            raise ModelError(
                f"job {self.id}: min_available must be between 1 and tasks={self.tasks}, "
                f"got {self.min_available}"
            )
        if self.time_limit_s <= 0:
            raise ModelError(f"job {self.id}: time_limit_s must be > 0, got {self.time_limit_s}")

    @property
    def gpu_milli(self) -> int:
        """Total milli-GPU of all tasks."""
        return self.tasks * self.request.gpu_milli

    @property
    def gpus(self) -> float:
        """Total GPUs of all tasks (fractions count as fractions)."""
        return self.gpu_milli / MILLI_PER_GPU

    @property
    def size_class(self) -> str:
        """Size-class label, for breakdowns of waits and slowdowns by job size."""
        return size_class(self.gpus)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A job plus its true duration: what a workload hands to the simulator."""

    job: Job
    duration_s: float

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ModelError(f"job {self.job.id}: duration_s must be > 0, got {self.duration_s}")


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """One task on one node: the node's index in the node table and the GPUs it holds.

    ``gpu_milli`` is what the task takes from each GPU in ``gpu_indices``
    (1000 for whole GPUs, less for a shared GPU). A task on a MIG instance
    holds no GPU of ``gpu_indices`` (it is empty) but the one ``mig`` slot.
    """

    node: int
    gpu_indices: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    mig: MigSlot | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding resources: started (all of its gang placed) or partially bound."""

    job: Job
    placements: tuple[TaskPlacement, ...]
    start_s: float
    """When it started running; for a partially bound job, when its first task was bound."""

    @property
    def expected_end_s(self) -> float:
        """When it ends at the latest, from its requested time limit."""
        return self.start_s + self.job.time_limit_s


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start, with the tasks already bound if it has been partially placed."""

    job: Job
    bound: tuple[TaskPlacement, ...] = ()

    @property
    def tasks_left(self) -> int:
        """Tasks still to place before the job can run."""
        return max(self.job.min_available - len(self.bound), 0)


# Field getters, for reading one field of many jobs in a C loop (``map(job_user, jobs)``): the
# per-cycle passes over long queues (fair shares, multifactor priorities, the submission-order
# check) read them for every waiting job.
job_user = operator.attrgetter("user")
job_group = operator.attrgetter("group")
job_submit = operator.attrgetter("submit_s")
