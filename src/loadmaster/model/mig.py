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

Everything here is data and pure functions. Which instances are in use is
runtime state of the simulator and the scheduler:
:class:`loadmaster.scheduling.mig_pool.MigPool`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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


def instance_milli(model: MigModel, profile: str) -> int:
    """An instance's compute share in milli-GPU: its compute slices over the model's (a 1g of 7 is 142),
    what GPU-time accounting charges it."""
    return 1000 * model.profile(profile).compute_slices // model.compute_slices


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
nominal (a 1g.10gb has about 9.75 GiB usable); the rule "jobs of 10 GB or less" of
docs/design-principles.md counts so."""


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
