"""MIG (multi-instance GPU): profiles and valid placements per GPU model, layouts, instance slots.

A MIG-capable GPU has ``memory_slots`` memory slices (8 on A100/H100/H200, 4 on
A30) and ``compute_slices`` compute slices (7, or 4 on A30). A GPU instance of a
profile occupies ``size`` consecutive memory slots from one of the profile's
allowed start positions, as NVIDIA's MIG user guide lists them (``nvidia-smi
mig -lgipp``: ``{0,2,4}:2`` for 2g.20gb). A *layout* is a set of instances
(profile, start) on one GPU; it is valid when every start is allowed for its
profile, no two instances share a memory slot, the compute slices add up to at
most the GPU's, and no profile exceeds its per-GPU maximum (one ``+me``
instance: there is one set of media engines).

:class:`MigPool` holds every MIG-mode GPU of a cluster with its layout and
which instances are in use; the simulator keeps the live one and each
scheduling cycle works on a copy. Everything here is pure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""Kubernetes extended-resource prefix of a MIG device (``nvidia.com/mig-1g.10gb``)."""

_PROFILE_NAME = re.compile(r"^[1-7]g\.[0-9]+gb(\+me)?$")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of a GPU model: its slices, memory and allowed start slots."""

    name: str
    compute_slices: int
    size: int
    """Memory slots the instance occupies, from its start."""
    memory_gb: int
    starts: tuple[int, ...]
    max_per_gpu: int


@dataclass(frozen=True, slots=True)
class MigModel:
    """A MIG-capable GPU model: its slice counts and profiles, smallest first."""

    name: str
    compute_slices: int
    memory_slots: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name``; a ModelError naming the profiles this model has otherwise."""
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise ModelError(f"MIG profile {name!r} does not exist on {self.name}; it has {known}")

    def has(self, name: str) -> bool:
        """True if the model offers profile ``name``."""
        return any(p.name == name for p in self.profiles)


def _model(
    name: str, compute: int, slots: int, rows: Sequence[tuple[str, int, int, tuple[int, ...]]]
) -> MigModel:
    profiles = []
    for profile_name, size, memory_gb, starts in rows:
        slices = int(profile_name.split("g", 1)[0])
        cap = 1 if profile_name.endswith("+me") else len(starts)  # one set of media engines per GPU
        profiles.append(MigProfile(profile_name, slices, size, memory_gb, starts, cap))
    return MigModel(name, compute, slots, tuple(profiles))


def _seven_slice(name: str, gb: tuple[int, int, int, int, int]) -> MigModel:
    """The A100/H100/H200 placement table (8 memory slots, 7 compute slices); ``gb`` per size 1,2,4,4,8."""
    one, two, three, four, seven = gb
    return _model(
        name,
        7,
        8,
        (
            (f"1g.{one}gb", 1, one, (0, 1, 2, 3, 4, 5, 6)),
            (f"1g.{one}gb+me", 1, one, (0, 1, 2, 3, 4, 5, 6)),
            (f"1g.{two}gb", 2, two, (0, 2, 4, 6)),
            (f"2g.{two}gb", 2, two, (0, 2, 4)),
            (f"3g.{three}gb", 4, three, (0, 4)),
            (f"4g.{four}gb", 4, four, (0,)),
            (f"7g.{seven}gb", 8, seven, (0,)),
        ),
    )


MIG_MODELS: Mapping[str, MigModel] = {
    "A100-40GB": _seven_slice("A100-40GB", (5, 10, 20, 20, 40)),
    "A100-80GB": _seven_slice("A100-80GB", (10, 20, 40, 40, 80)),
    "H100-80GB": _seven_slice("H100-80GB", (10, 20, 40, 40, 80)),
    "H200-141GB": _seven_slice("H200-141GB", (18, 35, 71, 71, 141)),
    "A30-24GB": _model(
        "A30-24GB",
        4,
        4,
        (
            ("1g.6gb", 1, 6, (0, 1, 2, 3)),
            ("1g.6gb+me", 1, 6, (0, 1, 2, 3)),
            ("2g.12gb", 2, 12, (0, 2)),
            ("2g.12gb+me", 2, 12, (0, 2)),
            ("4g.24gb", 4, 24, (0,)),
        ),
    ),
}
"""MIG-capable GPU models and their profiles, from NVIDIA's MIG user guide."""


def mig_model_for(gpu_model: str) -> MigModel | None:
    """The MIG model of a resource type's ``gpu_model`` (``A100-SXM4-80GB`` is A100-80GB).

    None if the model is not MIG-capable.
    """
    text = gpu_model.upper()
    for name, model in MIG_MODELS.items():
        family, memory = name.split("-")
        if family in text and re.search(rf"(^|[^0-9]){memory}", text):
            return model
    return None


def profile_name(resource: str) -> str:
    """``1g.10gb`` from ``nvidia.com/mig-1g.10gb`` or ``1g.10gb``; a ModelError for anything else."""
    name = resource.removeprefix(MIG_RESOURCE_PREFIX)
    if not _PROFILE_NAME.match(name):
        raise ModelError(
            f"MIG profile {resource!r} is not a profile name; "
            f"expected e.g. 1g.10gb or {MIG_RESOURCE_PREFIX}1g.10gb"
        )
    return name


@dataclass(frozen=True, slots=True, order=True)
class MigInstance:
    """One GPU instance of a layout: its profile's name and its start memory slot."""

    profile: str
    start: int


def layout_problem(model: MigModel, layout: Iterable[MigInstance]) -> str | None:
    """Why ``layout`` is not a valid layout of ``model``, or None if it is."""
    used = [False] * model.memory_slots
    compute = 0
    counts: dict[str, int] = {}
    for instance in layout:
        if not model.has(instance.profile):
            return f"{instance.profile} does not exist on {model.name}"
        profile = model.profile(instance.profile)
        if instance.start not in profile.starts:
            return f"{profile.name} cannot start at slot {instance.start}; allowed: {profile.starts}"
        span = range(instance.start, instance.start + profile.size)
        if any(used[slot] for slot in span):
            return f"{profile.name} at slot {instance.start} overlaps another instance"
        for slot in span:
            used[slot] = True
        compute += profile.compute_slices
        counts[profile.name] = counts.get(profile.name, 0) + 1
        if counts[profile.name] > profile.max_per_gpu:
            return f"at most {profile.max_per_gpu} {profile.name} per GPU"
    if compute > model.compute_slices:
        return f"{compute} compute slices used, {model.name} has {model.compute_slices}"
    return None


def check_layout(model: MigModel, layout: Iterable[MigInstance]) -> tuple[MigInstance, ...]:
    """``layout`` sorted by start if it is valid on ``model``; a ModelError saying why not otherwise."""
    instances = tuple(sorted(layout, key=lambda i: (i.start, i.profile)))
    problem = layout_problem(model, instances)
    if problem is not None:
        raise ModelError(f"invalid MIG layout on {model.name}: {problem}")
    return instances


def pack_layout(model: MigModel, profiles: Sequence[str]) -> tuple[MigInstance, ...]:
    """Place ``profiles`` (names, any order) on one GPU; a ModelError if they do not fit together.

    Largest first, each at the lowest start that still lets the rest fit (a
    small backtracking search: 3g+2g+1g+1g fits only with the 3g at slot 4).
    """
    ordered = sorted(profiles, key=lambda name: (-model.profile(name).size, name))
    found = _place(model, ordered, ())
    if found is None:
        raise ModelError(f"MIG profiles {', '.join(profiles)} do not fit together on one {model.name}")
    return check_layout(model, found)


def _place(
    model: MigModel, rest: Sequence[str], layout: tuple[MigInstance, ...]
) -> tuple[MigInstance, ...] | None:
    if not rest:
        return layout
    for start in model.profile(rest[0]).starts:
        candidate = (*layout, MigInstance(rest[0], start))
        if layout_problem(model, candidate) is None:
            found = _place(model, rest[1:], candidate)
            if found is not None:
                return found
    return None


def parse_layout(model: MigModel, text: str) -> tuple[MigInstance, ...]:
    """A layout from ``"3g.40gb + 2g.20gb + 1g.10gb x2"`` (``xN`` repeats a profile).

    The instances are placed by :func:`pack_layout`.
    """
    names: list[str] = []
    for part in (p.strip() for p in re.split(r"\s\+\s*", text.strip())):
        if not part:
            raise ModelError(f"MIG layout {text!r}: empty part")
        name, _, count = part.partition(" x")
        repeat = int(count) if count.strip().isdigit() else (1 if not count else -1)
        if repeat < 1:
            raise ModelError(f"MIG layout {text!r}: {part!r} is not 'PROFILE' or 'PROFILE xN'")
        names.extend([profile_name(name.strip())] * repeat)
    return pack_layout(model, names)


SMALLEST_FIT = "smallest-fit"
"""``interactive_default`` value: each job gets the smallest profile of its pool's layout that holds its
GPU memory (Run:ai's dynamic MIG asks for memory and gets the smallest fitting slice the same way)."""

MIB_PER_PROFILE_GB = 1024
"""MiB per GB of a profile's name: ``1g.10gb`` holds a 10 GiB (10,240 MiB) need. The names are
nominal (a 1g.10gb has about 9.75 GiB usable); MISSION.md's rule "jobs of 10 GB or less" counts so."""


def smallest_fitting(model: MigModel, layout: Iterable[MigInstance], memory_mib: int) -> str | None:
    """The smallest profile in ``layout`` whose memory holds ``memory_mib``; None if none does.

    Smallest by memory, then compute slices, then name. Media-engine profiles (``+me``) are left to
    the jobs that name them: there is one per GPU, and a notebook does not decode video.
    """
    names = {i.profile for i in layout if not i.profile.endswith("+me")}
    ranked = sorted((model.profile(n) for n in names), key=lambda p: (p.memory_gb, p.compute_slices, p.name))
    for profile in ranked:
        if profile.memory_gb * MIB_PER_PROFILE_GB >= memory_mib:
            return profile.name
    return None


def layout_text(layout: Iterable[MigInstance]) -> str:
    """``3g.40gb + 2g.20gb + 1g.10gb x2``: the profiles of a layout, largest first, repeats counted."""
    counts: dict[str, int] = {}
    for instance in sorted(layout, key=lambda i: (-int(i.profile.split("g", 1)[0]), i.start)):
        counts[instance.profile] = counts.get(instance.profile, 0) + 1
    return " + ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items()) or "(empty)"


def maximal_layouts(model: MigModel, profiles: Iterable[str]) -> list[tuple[MigInstance, ...]]:
    """Every valid layout of ``profiles`` (names) to which no further instance of them can be added."""
    return list(_maximal(model, tuple(sorted(set(profiles)))))


@functools.cache
def _maximal(model: MigModel, profiles: tuple[str, ...]) -> tuple[tuple[MigInstance, ...], ...]:
    options = [MigInstance(p.name, s) for p in model.profiles if p.name in profiles for s in p.starts]
    found: set[tuple[MigInstance, ...]] = set()

    def grow(layout: tuple[MigInstance, ...], first: int) -> None:
        extended = False
        for i in range(first, len(options)):
            candidate = (*layout, options[i])
            if layout_problem(model, candidate) is None:
                extended = True
                grow(candidate, i + 1)
        if not extended and all(layout_problem(model, (*layout, o)) is not None for o in options):
            found.add(tuple(sorted(layout)))

    grow((), 0)
    return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class MigSlot:
    """The one MIG instance a task holds: which GPU of its node, which instance, and its GPU share.

    ``milli`` is the instance's compute share in milli-GPU (a 1g of 7 is 142),
    for GPU-time accounting only.
    """

    gpu: int
    profile: str
    start: int
    milli: int


@dataclass(frozen=True, slots=True)
class MigPoolConfig:
    """A pool's MIG configuration: the layout its GPUs get, how many per node, the interactive default.

    ``gpus_per_node`` None: every GPU of the pool's nodes is in MIG mode;
    else the first that many of each node. ``interactive_default`` says what
    a single-task job of at most one GPU gets in this pool when it asks for
    no profile itself (notebooks on MIG slices): a profile name (every such
    job gets it), :data:`SMALLEST_FIT` (the smallest profile of the layout
    that holds the job's GPU memory; a job no profile holds keeps its
    request), or None (jobs keep their requests).
    """

    pool: str
    layout: str
    gpus_per_node: int | None = None
    interactive_default: str | None = None


@dataclass(slots=True)
class MigGpu:
    """One MIG-mode GPU: its model, layout, which instances are in use, and whether it is usable.

    ``ready`` is False while the GPU is being reconfigured or its node is rebooting.
    """

    model: MigModel
    layout: tuple[MigInstance, ...]
    used: list[bool]
    ready: bool = True

    @property
    def empty(self) -> bool:
        """True when no instance is in use (the only time the layout may change)."""
        return not any(self.used)


@dataclass(eq=False)
class MigPool:
    """Every MIG-mode GPU of a cluster, keyed by (node index, GPU index), with free counts per profile.

    ``free[node, k]`` counts the free instances of ``profiles[k]`` on ready GPUs
    of ``node``; it is kept in step by every method, so that fit is a column lookup.
    """

    node_count: int
    gpus: dict[tuple[int, int], MigGpu]
    profiles: list[str] = field(default_factory=list)
    free: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    by_node: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """The MIG-mode GPU indices of each node that has any (static: layouts change, GPUs do not)."""
    used_slices: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: compute slices of its MIG-mode GPUs held by tasks, kept in step by occupy and vacate."""
    slices_per_gpu: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: compute slices of one of its MIG-mode GPUs (1 where it has none; static)."""
    total_slices: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: compute slices of all its MIG-mode GPUs (static)."""

    @classmethod
    def build(
        cls, node_count: int, gpus: Mapping[tuple[int, int], tuple[MigModel, Sequence[MigInstance]]]
    ) -> MigPool:
        """A pool of GPUs with the given layouts, all free and ready."""
        names = sorted({p.name for model, _ in gpus.values() for p in model.profiles})
        pool = cls(node_count, {}, names, np.zeros((node_count, len(names)), dtype=np.int64))
        pool.used_slices = np.zeros(node_count, dtype=np.int64)
        pool.slices_per_gpu = np.ones(node_count, dtype=np.int64)
        pool.total_slices = np.zeros(node_count, dtype=np.int64)
        for key, (model, layout) in sorted(gpus.items()):
            pool.gpus[key] = MigGpu(model, (), [], ready=False)
            pool.set_layout(key[0], key[1], layout, ready=True)
            pool.by_node[key[0]] = (*pool.by_node.get(key[0], ()), key[1])
            pool.slices_per_gpu[key[0]] = model.compute_slices  # one resource type, so one model, per node
            pool.total_slices[key[0]] += model.compute_slices
        return pool

    def idle_gpus(self) -> npt.NDArray[np.float64]:
        """Per node: the compute of its MIG-mode GPUs that no task holds, in GPUs (a 3g of 7 in use
        on one GPU leaves 4/7). What the per-GPU free arrays, which show MIG GPUs as 0 free, leave out."""
        idle: npt.NDArray[np.float64] = (self.total_slices - self.used_slices) / self.slices_per_gpu
        return idle

    def copy(self) -> MigPool:
        """An independent copy (each scheduling cycle works on one)."""
        gpus = {k: MigGpu(g.model, g.layout, list(g.used), g.ready) for k, g in self.gpus.items()}
        return MigPool(
            self.node_count,
            gpus,
            self.profiles,
            self.free.copy(),
            self.by_node,
            self.used_slices.copy(),
            self.slices_per_gpu,
            self.total_slices,
        )

    def free_count(self, profile: str) -> npt.NDArray[np.int64]:
        """Free instances of ``profile`` per node (a view; zeros if no GPU has the profile)."""
        if profile not in self.profiles:
            return np.zeros(self.node_count, dtype=np.int64)
        return self.free[:, self.profiles.index(profile)]

    def _count(self, node: int, gpu: MigGpu, sign: int) -> None:
        if not gpu.ready:
            return
        for instance, used in zip(gpu.layout, gpu.used, strict=True):
            if not used:
                self.free[node, self.profiles.index(instance.profile)] += sign

    def set_layout(self, node: int, gpu_index: int, layout: Sequence[MigInstance], ready: bool) -> None:
        """Give an empty GPU a new (valid) layout; a ModelError if any instance is in use."""
        gpu = self.gpus[(node, gpu_index)]
        if not gpu.empty:
            raise ModelError(
                f"GPU {gpu_index} of node {node}: the MIG layout can change only when every instance is free"
            )
        instances = check_layout(gpu.model, layout)
        self._count(node, gpu, -1)
        gpu.layout, gpu.used, gpu.ready = instances, [False] * len(instances), ready
        self._count(node, gpu, +1)

    def set_ready(self, node: int, gpu_index: int, ready: bool) -> None:
        """Make a GPU usable again, or unusable (reconfiguring, rebooting)."""
        gpu = self.gpus[(node, gpu_index)]
        self._count(node, gpu, -1)
        gpu.ready = ready
        self._count(node, gpu, +1)

    def node_gpus(self, node: int) -> tuple[int, ...]:
        """The MIG-mode GPU indices of ``node``."""
        return self.by_node.get(node, ())

    def choose(self, node: int, profile: str) -> MigSlot | None:
        """The free instance of ``profile`` on ``node`` to use: on the fullest ready GPU, lowest start."""
        best: tuple[int, int, int] | None = None
        for index in self.by_node.get(node, ()):
            gpu = self.gpus[(node, index)]
            if not gpu.ready:
                continue
            for position, instance in enumerate(gpu.layout):
                if instance.profile == profile and not gpu.used[position]:
                    key = (-sum(gpu.used), index, position)
                    best = key if best is None or key < best else best
        if best is None:
            return None
        gpu = self.gpus[(node, best[1])]
        instance = gpu.layout[best[2]]
        milli = 1000 * gpu.model.profile(profile).compute_slices // gpu.model.compute_slices
        return MigSlot(best[1], profile, instance.start, milli)

    def occupy(self, node: int, slot: MigSlot) -> None:
        """Mark ``slot`` used; a ModelError if it is not a free instance of a ready GPU."""
        gpu, position = self._find(node, slot)
        if gpu.used[position] or not gpu.ready:
            raise ModelError(f"MIG {slot.profile}@{slot.start} on GPU {slot.gpu} of node {node} is not free")
        gpu.used[position] = True
        self.free[node, self.profiles.index(slot.profile)] -= 1
        self.used_slices[node] += gpu.model.profile(slot.profile).compute_slices

    def vacate(self, node: int, slot: MigSlot) -> None:
        """Mark ``slot`` free again."""
        gpu, position = self._find(node, slot)
        if not gpu.used[position]:
            raise ModelError(
                f"MIG {slot.profile}@{slot.start} on GPU {slot.gpu} of node {node} is already free"
            )
        gpu.used[position] = False
        self.used_slices[node] -= gpu.model.profile(slot.profile).compute_slices
        if gpu.ready:
            self.free[node, self.profiles.index(slot.profile)] += 1

    def _find(self, node: int, slot: MigSlot) -> tuple[MigGpu, int]:
        gpu = self.gpus.get((node, slot.gpu))
        wanted = MigInstance(slot.profile, slot.start)
        if gpu is None or wanted not in gpu.layout:
            raise ModelError(f"node {node} GPU {slot.gpu} has no MIG instance {slot.profile}@{slot.start}")
        return gpu, gpu.layout.index(wanted)

    def instances(self) -> Iterator[tuple[int, int, MigGpu]]:
        """Every MIG GPU as (node, GPU index, state), in index order."""
        for (node, index), gpu in sorted(self.gpus.items()):
            yield node, index, gpu


def mig_speedup(used_fraction: float, compute_slices: int, total_slices: int = 7) -> float:
    """Speed of a job on a MIG instance relative to a whole GPU.

    The job can keep busy only ``used_fraction`` of a whole GPU's SMs (what it
    measured there); an instance of ``compute_slices`` of ``total_slices`` has
    that share of the SMs. Its speed is ``min(share, used) / used``: 1 when the
    instance is at least as large as what the job uses, proportionally less below.
    """
    if not 0 < used_fraction <= 1:
        raise ModelError(f"used_fraction must be in (0, 1], got {used_fraction}")
    share = compute_slices / total_slices
    return min(share, used_fraction) / used_fraction
