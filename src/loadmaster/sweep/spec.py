"""The sweep file: a grid (or a list) of cells, validated like every config file.

```yaml
name: load-curve              # default: the file's stem
clusters: [lab]               # built-in names or cluster files (relative to this file)
workloads: [lab]              # built-in names or workload spec files
traces: []                    # trace files, replayed with the defaults of ``kind: trace``
jobs: 2000                    # jobs per workload (default: each workload's own)
loads: [0.7, 0.9, 1.1]        # offered loads (default: each workload's own)
profiles_files: [builtin]     # where the profiles come from
profiles: [fifo, sds, fair]   # default: every profile of those files
plugin_args:                  # named variants of the profiles' plugin arguments
  default: {}
  short-reserve: {backfill: {starvation_s: 3600}}
seeds: {first: 0, count: 10}  # or a list [0, 1, 2]
retries: 2                    # attempts after the first, per failed cell
compare: [[fifo, sds]]        # pairs for the paired table (default: each profile against the first)
cells:                        # optional: exactly these cells instead of the grid
  - {load: 0.9, profile: sds, seed: 3}
```

A seed draws the workload (the generator's or the trace sampler's seed) and the
scheduler's random choices, so two profiles on the same seed see the same jobs:
that is what makes the paired comparison paired.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadmaster import __version__
from loadmaster.config import BUILTIN_CLUSTERS, BUILTIN_WORKLOADS, load_cluster
from loadmaster.config.profiles import BUILTIN_PROFILES, PluginEntry, ProfilesFile
from loadmaster.config.yamlfile import YamlDocument, find_document, read_yaml, validate
from loadmaster.errors import ConfigError
from loadmaster.scheduling import PLUGINS, PluginSpec, build_profile

CELL_FORMAT = 1
"""Bumped when what a cell stores, or how it is computed, changes: old results stop matching."""

DEFAULT_METRICS = (
    "mean_wait_s",
    "p99_wait_s",
    "mean_bounded_slowdown",
    "makespan_s",
    "allocation_mean",
    "jain_fairness",
    "wasted_gpu_hours",
    "jobs_unfinished",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeedRange(_Strict):
    """``count`` seeds from ``first`` on."""

    first: int = Field(default=0, ge=0)
    count: int = Field(ge=1, le=100_000)


class CellEntry(_Strict):
    """One cell of an explicit list; a field left out takes the sweep's single value of it."""

    cluster: str | None = None
    workload: str | None = None
    trace: str | None = None
    load: float | None = Field(default=None, gt=0, le=10)
    profile: str | None = None
    variant: str | None = None
    seed: int | None = Field(default=None, ge=0)


def _no_variant() -> dict[str, dict[str, dict[str, Any]]]:
    return {"default": {}}


class SweepFile(_Strict):
    """A sweep: the grid's axes, what to compare and how hard to retry."""

    name: str | None = None
    description: str = ""
    clusters: list[str] = Field(default_factory=lambda: ["lab"], min_length=1)
    workloads: list[str] = Field(default_factory=list)
    traces: list[str] = Field(default_factory=list)
    jobs: int | None = Field(default=None, ge=1, le=10_000_000)
    loads: list[float] | None = Field(default=None, min_length=1)
    profiles_files: list[str] = Field(default_factory=lambda: [BUILTIN_PROFILES], min_length=1)
    profiles: list[str] | None = Field(default=None, min_length=1)
    plugin_args: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=_no_variant)
    seeds: list[int] | SeedRange = Field(default_factory=lambda: [0])
    period_s: float | None = Field(default=None, gt=0)
    retries: int = Field(default=2, ge=0, le=20)
    retry_backoff_s: float = Field(default=1.0, ge=0)
    compare: list[tuple[str, str]] | None = None
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS), min_length=1)
    bootstrap: int = Field(default=2000, ge=100, le=100_000)
    """Bootstrap resamples for the confidence intervals (seeded: the same file, the same report)."""
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    cells: list[CellEntry] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _some_workload(self) -> SweepFile:
        if not self.workloads and not self.traces:
            object.__setattr__(self, "workloads", ["lab"])
        if self.loads is not None and any(not 0 < x <= 10 for x in self.loads):
            raise ValueError(f"loads must be in (0, 10], got {self.loads}")
        return self


@dataclass(frozen=True, slots=True)
class Input:
    """A file a cell reads (or a built-in name), with the digest of its content."""

    name: str
    """As the sweep file wrote it (the table's label)."""
    path: str
    """What the loader is given: a built-in name or an absolute path."""
    digest: str


@dataclass(frozen=True, slots=True)
class ProfileDef:
    """A profile as data: what a worker builds, and what the cell's key covers."""

    label: str
    name: str
    actions: tuple[str, ...]
    plugins: tuple[tuple[str, str, float], ...]
    """(name, args as canonical JSON, weight) per plugin, in order."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One simulation: everything that determines its result, and the labels it is shown with."""

    cluster: Input
    workload: Input
    kind: str
    """``workload`` (a spec file or built-in) or ``trace`` (a trace file replayed)."""
    jobs: int | None
    load: float | None
    profile: ProfileDef
    variant: str
    seed: int
    period_s: float | None

    @property
    def key(self) -> str:
        """Hash of everything that determines the result, and of loadmaster's version."""
        return hashlib.sha256(canonical(self.identity()).encode()).hexdigest()[:32]

    def identity(self) -> dict[str, Any]:
        """What the key covers (labels such as the profile's or the variant's name excluded)."""
        return {
            "format": CELL_FORMAT,
            "loadmaster": __version__,
            "cluster": self.cluster.digest,
            "workload": [self.kind, self.workload.digest],
            "jobs": self.jobs,
            "load": self.load,
            "actions": list(self.profile.actions),
            "plugins": [list(p) for p in self.profile.plugins],
            "seed": self.seed,
            "period_s": self.period_s,
        }

    def labels(self) -> dict[str, Any]:
        """The table's columns that say which cell a row is."""
        return {
            "cluster": self.cluster.name,
            "workload": self.workload.name,
            "kind": self.kind,
            "workload_jobs": self.jobs,
            "load": self.load,
            "profile": self.profile.label,
            "variant": self.variant,
            "seed": self.seed,
        }


def canonical(data: Any) -> str:
    """JSON with sorted keys and no spaces: the same data, the same text."""
    import json  # noqa: PLC0415

    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: its cells in a fixed order, and what the report compares."""

    name: str
    source: str
    spec: SweepFile
    cells: tuple[Cell, ...]
    compare: tuple[tuple[str, str], ...]


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks (traces can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _input(
    doc: YamlDocument, field: str, index: int, name: str, *, builtin: tuple[str, ...], kind: str
) -> Input:
    if name in builtin:
        text = resources.files("loadmaster.data").joinpath(kind, f"{name}.yaml").read_bytes()
        return Input(name, name, hashlib.sha256(text).hexdigest())
    path = Path(name) if Path(name).is_absolute() else Path(doc.source).parent / name
    if not path.is_file():
        allowed = f"; built-in: {', '.join(builtin)}" if builtin else ""
        raise doc.error([field, index], f"no such file {str(path)!r}{allowed}")
    return Input(name, str(path.resolve()), file_digest(path))


def load_sweep(path: Path) -> Sweep:
    """Read and check a sweep file: every file it names exists, every profile and variant builds."""
    doc = read_yaml(path)
    spec = validate(SweepFile, doc)
    clusters = [
        _input(doc, "clusters", i, c, builtin=BUILTIN_CLUSTERS, kind="clusters")
        for i, c in enumerate(spec.clusters)
    ]
    for i, cluster in enumerate(clusters):
        try:
            load_cluster(cluster.path)
        except ConfigError as exc:
            raise doc.error(["clusters", i], f"not a valid cluster: {exc}") from None
    workloads = [
        (_input(doc, "workloads", i, w, builtin=BUILTIN_WORKLOADS, kind="workloads"), "workload")
        for i, w in enumerate(spec.workloads)
    ] + [(_input(doc, "traces", i, t, builtin=(), kind="traces"), "trace") for i, t in enumerate(spec.traces)]
    profiles = _profiles(doc, spec)
    variants = {name: _variant(doc, spec, name, profiles) for name in spec.plugin_args}
    seeds = (
        spec.seeds
        if isinstance(spec.seeds, list)
        else list(range(spec.seeds.first, spec.seeds.first + spec.seeds.count))
    )
    loads: list[float | None] = list(spec.loads) if spec.loads else [None]
    axes = _Axes(clusters, workloads, loads, [p.label for p in profiles], list(variants), seeds)
    picks = _grid(axes) if spec.cells is None else _listed(doc, spec.cells, axes)
    cells = tuple(
        Cell(cluster, workload, kind, spec.jobs, load, variants[variant][label], variant, seed, spec.period_s)
        for cluster, (workload, kind), load, label, variant, seed in picks
    )
    labels = [p.label for p in profiles]
    pairs = _pairs(doc, spec, labels)
    for metric in spec.metrics:
        if metric not in METRIC_NAMES:
            index = spec.metrics.index(metric)
            raise doc.error(
                ["metrics", index], f"unknown metric {metric!r}; allowed: {', '.join(METRIC_NAMES)}"
            )
    return Sweep(spec.name or path.stem, str(path), spec, cells, pairs)


METRIC_NAMES = (
    "jobs",
    "jobs_ran",
    "jobs_rejected",
    "jobs_unfinished",
    "mean_wait_s",
    "median_wait_s",
    "p95_wait_s",
    "p99_wait_s",
    "max_wait_s",
    "mean_jct_s",
    "mean_slowdown",
    "mean_bounded_slowdown",
    "p99_bounded_slowdown",
    "makespan_s",
    "allocation_mean",
    "fragmentation_mean",
    "jain_fairness",
    "starved_jobs",
    "held_idle_gpu_hours",
    "preempted_jobs",
    "lost_gpu_hours",
    "wasted_gpu_hours",
)
"""The scalar fields of :class:`loadmaster.metrics.RunSummary`: one column each in the table."""


@dataclass(frozen=True)
class _Axes:
    clusters: list[Input]
    workloads: list[tuple[Input, str]]
    loads: list[float | None]
    profiles: list[str]
    variants: list[str]
    seeds: list[int]


Pick = tuple[Input, tuple[Input, str], float | None, str, str, int]


def _grid(axes: _Axes) -> list[Pick]:
    return list(
        itertools.product(axes.clusters, axes.workloads, axes.loads, axes.profiles, axes.variants, axes.seeds)
    )


def _listed(doc: YamlDocument, entries: list[CellEntry], axes: _Axes) -> list[Pick]:
    picks: list[Pick] = []
    for i, entry in enumerate(entries):

        def one(field: str, given: Any, choices: list[Any], label: Any = lambda x: x, i: int = i) -> Any:
            if given is None:
                if len(choices) != 1:
                    raise doc.error(
                        ["cells", i], f"{field} is missing and the sweep has {len(choices)} values of it"
                    )
                return choices[0]
            found = [c for c in choices if label(c) == given]
            if not found:
                allowed = ", ".join(str(label(c)) for c in choices)
                raise doc.error(["cells", i, field], f"{given!r} is not in the sweep's values: {allowed}")
            return found[0]

        if entry.workload is not None and entry.trace is not None:
            raise doc.error(["cells", i], "give a workload or a trace, not both")
        source = entry.workload if entry.workload is not None else entry.trace
        picks.append(
            (
                one("cluster", entry.cluster, axes.clusters, lambda c: c.name),
                one(
                    "workload" if entry.trace is None else "trace",
                    source,
                    axes.workloads,
                    lambda w: w[0].name,
                ),
                one("load", entry.load, axes.loads),
                one("profile", entry.profile, axes.profiles),
                one("variant", entry.variant, axes.variants),
                one("seed", entry.seed, axes.seeds),
            )
        )
    return picks


@dataclass(frozen=True)
class _Named:
    label: str
    name: str
    source: str
    actions: tuple[str, ...]
    plugins: tuple[PluginEntry | str, ...]


def _profiles(doc: YamlDocument, spec: SweepFile) -> list[_Named]:
    found: list[_Named] = []
    for i, name in enumerate(spec.profiles_files):
        if name == BUILTIN_PROFILES:
            source = find_document("profiles", name, (BUILTIN_PROFILES,))
        else:
            path = Path(name) if Path(name).is_absolute() else Path(doc.source).parent / name
            if not path.is_file():
                raise doc.error(["profiles_files", i], f"no such file {str(path)!r}; or: {BUILTIN_PROFILES}")
            source = read_yaml(path)
        entries = validate(ProfilesFile, source)
        stem = Path(name).stem
        for pname, entry in entries.profiles.items():
            found.append(_Named(pname, pname, stem, tuple(entry.actions), tuple(entry.plugins)))
    counts: dict[str, int] = {}
    for p in found:
        counts[p.name] = counts.get(p.name, 0) + 1
    named = [
        _Named(
            f"{p.name}@{p.source}" if counts[p.name] > 1 else p.name, p.name, p.source, p.actions, p.plugins
        )
        for p in found
    ]
    if spec.profiles is None:
        return named
    chosen: list[_Named] = []
    for i, want in enumerate(spec.profiles):
        match = [p for p in named if want in {p.label, p.name}]
        if not match:
            raise doc.error(
                ["profiles", i], f"unknown profile {want!r}; available: {', '.join(p.label for p in named)}"
            )
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def _variant(
    doc: YamlDocument, spec: SweepFile, variant: str, profiles: list[_Named]
) -> dict[str, ProfileDef]:
    """Every profile with this variant's plugin arguments merged in, built once to check them."""
    changes = spec.plugin_args[variant]
    for plugin in changes:
        if plugin not in PLUGINS:
            raise doc.error(
                ["plugin_args", variant, plugin], f"unknown plugin; allowed: {', '.join(PLUGINS)}"
            )
        if not any(_plugin_name(e) == plugin for p in profiles for e in p.plugins):
            raise doc.error(["plugin_args", variant, plugin], "no profile of the sweep uses this plugin")
    out: dict[str, ProfileDef] = {}
    for p in profiles:
        specs = []
        for entry in p.plugins:
            name = _plugin_name(entry)
            args = {} if isinstance(entry, str) else dict(entry.args)
            weight = 1.0 if isinstance(entry, str) else entry.weight
            specs.append(PluginSpec(name, {**args, **changes.get(name, {})}, weight))
        try:
            build_profile(p.name, p.actions, specs, doc.source)
        except ConfigError as exc:
            raise doc.error(
                ["plugin_args", variant], f"profile {p.label}: {exc.field}: {exc.detail}"
            ) from None
        plugins = tuple((s.name, canonical(s.args), float(s.weight)) for s in specs)
        out[p.label] = ProfileDef(p.label, p.name, p.actions, plugins)
    return out


def _plugin_name(entry: PluginEntry | str) -> str:
    return entry if isinstance(entry, str) else entry.name


def _pairs(doc: YamlDocument, spec: SweepFile, labels: list[str]) -> tuple[tuple[str, str], ...]:
    if spec.compare is None:
        return tuple((labels[0], other) for other in labels[1:])
    for i, pair in enumerate(spec.compare):
        for j, name in enumerate(pair):
            if name not in labels:
                raise doc.error(
                    ["compare", i, j], f"unknown profile {name!r}; in the sweep: {', '.join(labels)}"
                )
    return tuple(spec.compare)
