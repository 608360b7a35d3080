"""The MIG layout planner: per-GPU layouts for a pool that serve the most of a demand mix.

Demand is the number of instances of each profile wanted at once (from the
recent history of requests, or a forecast). A plan's *served* demand is, per
profile, the smaller of the instances the plan offers and the instances
wanted, weighted by the profile's compute slices (serving a 3g request is
worth three 1g ones). The planner is greedy: GPU after GPU, it picks the
maximal layout that serves the most of the demand still unserved (ties: the
fewest idle compute slices, then the layout's text); once all demand is
served it starts over with the whole mix, so spare GPUs follow the mix. Greedy
is not always optimal, but every layout it picks is valid and it never serves
less than the best single layout repeated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from loadmaster.errors import ModelError
from loadmaster.model import MILLI_PER_GPU, MigPoolConfig, NodeTable, TaskRequest, TraceJob
from loadmaster.model.mig import (
    SMALLEST_FIT,
    MigInstance,
    MigModel,
    layout_text,
    maximal_layouts,
    mig_model_for,
    parse_layout,
    smallest_fitting,
)


@dataclass(frozen=True, slots=True)
class MigPlan:
    """Layouts for each GPU of a pool, with the demand they serve and what the current layouts serve."""

    layouts: tuple[tuple[MigInstance, ...], ...]
    served_slices: float
    current_served_slices: float
    demand_slices: float

    @property
    def gain_slices(self) -> float:
        """Compute slices of demand served beyond what the current layouts serve."""
        return self.served_slices - self.current_served_slices

    def summary(self) -> dict[str, int]:
        """How many GPUs get each layout, by layout text."""
        counts: dict[str, int] = {}
        for layout in self.layouts:
            text = layout_text(layout)
            counts[text] = counts.get(text, 0) + 1
        return counts


def served(model: MigModel, layouts: Sequence[Sequence[MigInstance]], demand: Mapping[str, float]) -> float:
    """Compute slices of ``demand`` (instances wanted per profile) that ``layouts`` can serve at once."""
    offered: dict[str, int] = {}
    for layout in layouts:
        for instance in layout:
            offered[instance.profile] = offered.get(instance.profile, 0) + 1
    total = 0.0
    for profile, wanted in demand.items():
        if model.has(profile):
            total += min(float(offered.get(profile, 0)), wanted) * model.profile(profile).compute_slices
    return total


def plan_layouts(
    model: MigModel, gpus: int, demand: Mapping[str, float], current: Sequence[Sequence[MigInstance]] = ()
) -> MigPlan:
    """Choose ``gpus`` layouts of ``model`` for ``demand``; ``current`` (the layouts now) is the baseline."""
    wanted = {p: float(n) for p, n in demand.items() if n > 0 and model.has(p)}
    candidates = _distinct(maximal_layouts(model, wanted)) if wanted else []
    layouts: list[tuple[MigInstance, ...]] = []
    left = dict(wanted)
    for _ in range(gpus if candidates else 0):
        if all(v <= 0 for v in left.values()):
            left = {p: left[p] + wanted[p] for p in wanted}
        best = max(candidates, key=lambda layout: _value(model, layout, left))
        layouts.append(best)
        for instance in best:
            left[instance.profile] -= 1
    demand_slices = sum(n * model.profile(p).compute_slices for p, n in wanted.items())
    return MigPlan(
        layouts=tuple(layouts) if layouts else tuple(tuple(c) for c in current),
        served_slices=served(model, layouts, wanted) if layouts else served(model, current, wanted),
        current_served_slices=served(model, current, wanted),
        demand_slices=demand_slices,
    )


def _distinct(layouts: Sequence[tuple[MigInstance, ...]]) -> list[tuple[MigInstance, ...]]:
    """One layout per multiset of profiles (where instances start does not change what they serve)."""
    seen: dict[str, tuple[MigInstance, ...]] = {}
    for layout in layouts:
        seen.setdefault(layout_text(layout), layout)
    return [seen[text] for text in sorted(seen)]


def _value(
    model: MigModel, layout: tuple[MigInstance, ...], left: Mapping[str, float]
) -> tuple[float, int, str]:
    """Demand the layout serves now (slices), then fewer idle slices, then text order (deterministic)."""
    room = dict(left)
    gain = 0.0
    for instance in layout:
        slices = model.profile(instance.profile).compute_slices
        take = min(1.0, max(room.get(instance.profile, 0.0), 0.0))
        gain += take * slices
        room[instance.profile] = room.get(instance.profile, 0.0) - 1
    used = sum(model.profile(i.profile).compute_slices for i in layout)
    return gain, used, _reverse(layout_text(layout))


def _reverse(text: str) -> str:
    """A key that makes ``max`` prefer the alphabetically first text."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def with_interactive_default(
    jobs: Sequence[TraceJob], configs: Sequence[MigPoolConfig], nodes: NodeTable
) -> list[TraceJob]:
    """Jobs of a pool with an ``interactive_default`` that ask for one task of at most one GPU and no
    MIG profile get a profile instead (notebooks on MIG slices); other jobs are unchanged.

    A named default goes to every such job. :data:`SMALLEST_FIT` gives each the smallest profile of
    the pool's layout that holds its GPU memory need: the ``gpu_memory_mib`` it asked for, else its
    share of the pool's smallest GPU memory (half a 24 GiB GPU needs 12 GiB); a job that no profile
    holds keeps its request. Run times are kept: an interactive session lasts as long as its user
    works, not as its GPU allows.
    """
    choosers = {c.pool: _chooser(c, nodes) for c in configs if c.interactive_default is not None}
    if not choosers:
        return list(jobs)
    out = []
    for trace in jobs:
        job, request = trace.job, trace.job.request
        choose = choosers.get(job.pool or "")
        small = job.tasks == 1 and request.mig_profile is None and 0 < request.gpu_milli <= MILLI_PER_GPU
        profile = choose(request) if choose is not None and small else None
        if profile is None:
            out.append(trace)
            continue
        mig_request = replace(request, gpu_milli=0, mig_profile=profile)
        out.append(replace(trace, job=replace(job, request=mig_request)))
    return out


def _chooser(config: MigPoolConfig, nodes: NodeTable) -> Callable[[TaskRequest], str | None]:
    """The profile a small job of ``config``'s pool gets, as a function of its request."""
    fixed = config.interactive_default
    if fixed != SMALLEST_FIT:
        return lambda _: fixed
    types = {n.resource_type for n in nodes.nodes if n.pool == config.pool}
    models = [mig_model_for(nodes.resource_types[t].gpu_model) for t in sorted(types)]
    if not models or models[0] is None:
        raise ModelError(f"MIG pool {config.pool!r}: no nodes with MIG-capable GPUs")
    model = models[0]  # the cluster spec checked the layout on every model of the pool
    layout = parse_layout(model, config.layout)
    gpu_memory_mib = min(nodes.resource_types[t].gpu_memory_mib for t in types)

    def choose(request: TaskRequest) -> str | None:
        need = request.gpu_memory_mib or -(-request.gpu_milli * gpu_memory_mib // MILLI_PER_GPU)
        return smallest_fitting(model, layout, need)

    return choose


def demand_from_jobs(jobs: Sequence[TraceJob]) -> dict[str, float]:
    """Instances of each MIG profile wanted at once on average: task-seconds over the jobs' span."""
    if not jobs:
        return {}
    start = min(t.job.submit_s for t in jobs)
    end = max(t.job.submit_s + t.duration_s for t in jobs)
    span = max(end - start, 1.0)
    wanted: dict[str, float] = {}
    for trace in jobs:
        profile = trace.job.request.mig_profile
        if profile is not None:
            wanted[profile] = wanted.get(profile, 0.0) + trace.job.tasks * trace.duration_s / span
    return wanted
