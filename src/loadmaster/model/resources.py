"""Resource types and task requests.

A GPU is counted in milli-GPU (1000 = one whole GPU) so that fractional
requests (openb style, 500 = half a GPU) and whole-GPU requests share one unit.
CPU is counted in milli-cores and memory in MiB, as Kubernetes does.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.errors import ModelError
from loadmaster.model.mig import profile_name

MILLI_PER_GPU = 1000
"""milli-GPU in one whole GPU."""


@dataclass(frozen=True, slots=True)
class ResourceType:
    """A GPU model plus the CPU and memory bundled with each GPU on one host class.

    Jobs ask for a type, not loose numbers: on an A100 training host each GPU
    comes with its share of the host's cores and memory, and a job that asks
    for 8 GPUs of that type implicitly asks for 8 such bundles.
    """

    name: str
    gpu_model: str
    gpu_memory_mib: int
    cpu_milli_per_gpu: int
    memory_mib_per_gpu: int
    interconnect: str = "ethernet"
    """Fabric between hosts of this class: "infiniband" or "ethernet"."""

    def __post_init__(self) -> None:
        for field in ("gpu_memory_mib", "cpu_milli_per_gpu", "memory_mib_per_gpu"):
            if getattr(self, field) < 0:
                raise ModelError(f"resource type {self.name}: {field} must be >= 0")


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """What one task (one pod, one worker) of a job needs on a single node.

    ``gpu_milli`` is either below 1000 (a share of one GPU) or a whole multiple
    of 1000 (that many whole GPUs on the same node); a task never spans nodes.
    ``mig_profile`` (``1g.10gb``) asks for exactly one MIG instance of that
    profile instead, and then ``gpu_milli`` must be 0: a container can use only
    one MIG device, and never a MIG device plus other GPUs.
    """

    gpu_milli: int
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_memory_mib: int = 0
    mig_profile: str | None = None

    def __post_init__(self) -> None:
        if self.gpu_milli < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ModelError(f"task request {self}: amounts must be >= 0")
        if self.gpu_milli > MILLI_PER_GPU and self.gpu_milli % MILLI_PER_GPU:
            raise ModelError(
                f"task request gpu_milli={self.gpu_milli}: a request above one GPU must be "
                f"a whole number of GPUs (a multiple of {MILLI_PER_GPU})"
            )
        if self.mig_profile is not None:
            object.__setattr__(self, "mig_profile", profile_name(self.mig_profile))
            if self.gpu_milli:
                raise ModelError(
                    f"task request mig_profile={self.mig_profile}, gpu_milli={self.gpu_milli}: a task "
                    "gets exactly one MIG device and no other GPU; set gpu_milli to 0"
                )

    @property
    def whole_gpus(self) -> int:
        """Whole GPUs the task needs (0 for a fractional request)."""
        return self.gpu_milli // MILLI_PER_GPU if self.gpu_milli >= MILLI_PER_GPU else 0

    @property
    def is_fractional(self) -> bool:
        """True when the task asks for a share of one GPU."""
        return 0 < self.gpu_milli < MILLI_PER_GPU

    @property
    def gpus(self) -> float:
        """GPUs as a float (0.5 for half a GPU)."""
        return self.gpu_milli / MILLI_PER_GPU
