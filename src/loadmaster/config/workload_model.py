"""Workload model files: a fitted :class:`~loadmaster.workload.fitted.WorkloadModel` as documented YAML.

``loadmaster workload fit`` writes the file and ``loadmaster workload sample``
reads it; a person may read and edit it in between (say, to give heavy users
a larger share of the jobs). Loading validates every field and names the
line and field of the first problem. The format is described in
docs/workload-fitting.md; the file's header comment repeats the essentials.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from loadmaster.config.yamlfile import YamlDocument, parse_yaml, read_yaml, validate
from loadmaster.errors import ConfigError, ModelError
from loadmaster.workload.fitted import (
    MODEL_VERSION,
    ArrivalModel,
    Atom,
    FittedOn,
    JobShape,
    PositiveDistribution,
    Quantiles,
    UserClass,
    WorkloadModel,
)
from loadmaster.workload.mixture import LogNormalComponent, LogNormalMixture

_DIGITS = 6
"""Significant digits of the numbers written: enough that a re-loaded model samples the same
distributions (to 1e-6), few enough to read."""

_SHARE_SLACK = 1e-3
"""How far shares and weights may sum from 1 before loading rejects them (rounding in the file,
hand edits); within it they are rescaled to sum to exactly 1."""

HEADER = """\
# loadmaster workload model, fitted by `loadmaster workload fit` (docs/workload-fitting.md).
# Sample jobs from it with `loadmaster workload sample MODEL --jobs N [--load L --gpus G]`.
#
# version            format version of this file
# fitted_on          the trace it was fitted to; capacity_gpus is the default --gpus
# arrivals           when jobs are submitted:
#   clock              wall (real dates: daily and weekly cycle) or relative (daily cycle only)
#   start_hour_of_week where the first submission falls, hours since Monday 00:00
#   hour_of_day        24 rate multipliers (mean 1), hour 0 first
#   day_of_week        7 rate multipliers (mean 1), Monday first
#   gap_s              gaps between submissions in operational time (the clock stretched by the
#                      rate multipliers, so a week is still a week), seconds: an atom at 0 is the
#                      share of jobs submitted together with the previous one (bursts), the rest
#                      a log-normal mixture
#   submit_resolution_s  submission times are rounded to this step (0: not rounded)
# classes            heavy users (the fewest top users by GPU-hours holding heavy_gpu_hour_share
#                    of them) and light users; per class:
#   users, job_share   distinct users and their share of all jobs (job shares sum to 1)
#   gpu_hour_share     share of the trace's GPU-hours (informational)
#   shapes             job shapes (tasks x milli-GPU per task; 1000 = one GPU) and their shares
#   duration_s         run time, seconds: atoms {value, share} (values many jobs take exactly),
#                      else a log-normal mixture of components {weight, median, sigma} (sigma of
#                      the natural log); resolution: draws are rounded to this step (0: not)
#   time_limit_ratio   requested time limit / run time as 101 quantiles (absent: no limits)
#   gpu_memory_mib     GPU memory per GPU, MiB, as 101 quantiles (absent: not recorded)
"""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComponentSpec(_Strict):
    """One log-normal component: its weight, median (the quantity's unit) and sigma of the natural log."""

    weight: float = Field(gt=0, le=1)
    median: float = Field(gt=0, allow_inf_nan=False)
    sigma: float = Field(gt=0, allow_inf_nan=False)


class AtomSpec(_Strict):
    """A value taken exactly, with its probability."""

    value: float = Field(ge=0, allow_inf_nan=False)
    share: float = Field(gt=0, lt=1)


class PositiveSpec(_Strict):
    """A quantity >= 0: point masses (atoms) plus a log-normal mixture, rounded to ``resolution``."""

    atoms: list[AtomSpec] = Field(default_factory=list)
    resolution: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    components: list[ComponentSpec] = Field(min_length=1)


class QuantilesSpec(_Strict):
    """An empirical distribution as quantiles at equally spaced probabilities from 0 to 1."""

    resolution: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    quantiles: list[float] = Field(min_length=2)


class ShapeSpec(_Strict):
    """A job shape and its share of the class's jobs."""

    tasks: int = Field(ge=1)
    gpu_milli_per_task: int = Field(ge=0)
    share: float = Field(gt=0, le=1)


class ClassSpec(_Strict):
    """One user class (heavy or light)."""

    users: int = Field(ge=1)
    job_share: float = Field(gt=0, le=1)
    gpu_hour_share: float = Field(default=0.0, ge=0, le=1)
    shapes: list[ShapeSpec] = Field(min_length=1)
    duration_s: PositiveSpec
    time_limit_ratio: QuantilesSpec | None = None
    gpu_memory_mib: QuantilesSpec | None = None


class ArrivalsSpec(_Strict):
    """When jobs are submitted."""

    clock: Literal["wall", "relative"]
    start_hour_of_week: float = Field(default=0.0, ge=0, lt=168)
    hour_of_day: list[float] = Field(min_length=24, max_length=24)
    day_of_week: list[float] = Field(min_length=7, max_length=7)
    gap_s: PositiveSpec
    submit_resolution_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class FittedOnSpec(_Strict):
    """The trace the model was fitted to."""

    source: str = ""
    jobs: int = Field(default=0, ge=0)
    span_s: float = Field(default=0.0, ge=0)
    capacity_gpus: int | None = Field(default=None, ge=1)
    offered_load: float | None = Field(default=None, ge=0)
    heavy_gpu_hour_share: float = Field(default=0.8, gt=0, le=1)


class WorkloadModelSpec(_Strict):
    """A whole workload model file."""

    version: Literal[1]
    fitted_on: FittedOnSpec = Field(default_factory=FittedOnSpec)
    arrivals: ArrivalsSpec
    classes: dict[str, ClassSpec] = Field(min_length=1)


def load_workload_model(path: Path) -> WorkloadModel:
    """Read and validate a model file; a problem raises ConfigError naming the line and field."""
    return _model(read_yaml(path))


def parse_workload_model(text: str, source: str = "<model>") -> WorkloadModel:
    """Like :func:`load_workload_model`, from text that came from ``source``."""
    return _model(parse_yaml(text, source))


def _model(doc: YamlDocument) -> WorkloadModel:
    if isinstance(doc.data, dict) and "version" in doc.data and doc.data["version"] != MODEL_VERSION:
        raise doc.error(
            ["version"],
            f"unsupported model version {doc.data['version']!r}; this loadmaster reads {MODEL_VERSION}",
        )
    spec = validate(WorkloadModelSpec, doc)
    _check_sum(doc, ["classes"], [c.job_share for c in spec.classes.values()], "job_share of the classes")
    classes = tuple(_user_class(doc, name, c) for name, c in spec.classes.items())
    scale = math.fsum(c.job_share for c in classes)
    classes = tuple(_with_share(c, c.job_share / scale) for c in classes)
    fitted_on = FittedOn(**spec.fitted_on.model_dump())
    try:
        return WorkloadModel(fitted_on, classes, _arrivals(doc, spec.arrivals), spec.version)
    except ModelError as exc:
        raise doc.error([], str(exc)) from None


def _with_share(c: UserClass, share: float) -> UserClass:
    return UserClass(
        c.name, c.users, share, c.gpu_hour_share, c.shapes, c.duration_s, c.time_limit_ratio, c.gpu_memory_mib
    )


def _check_sum(doc: YamlDocument, path: list[str | int], values: list[float], what: str) -> None:
    total = math.fsum(values)
    if abs(total - 1.0) > _SHARE_SLACK:
        raise doc.error(path, f"the {what} must sum to 1, got {total:.6g}")


def _user_class(doc: YamlDocument, name: str, spec: ClassSpec) -> UserClass:
    where: list[str | int] = ["classes", name]
    _check_sum(doc, [*where, "shapes"], [s.share for s in spec.shapes], "shares of the shapes")
    total = math.fsum(s.share for s in spec.shapes)
    shapes = tuple(JobShape(s.tasks, s.gpu_milli_per_task, s.share / total) for s in spec.shapes)
    try:
        return UserClass(
            name=name,
            users=spec.users,
            job_share=spec.job_share,
            gpu_hour_share=spec.gpu_hour_share,
            shapes=shapes,
            duration_s=_positive(doc, [*where, "duration_s"], spec.duration_s),
            time_limit_ratio=_quantiles(doc, [*where, "time_limit_ratio"], spec.time_limit_ratio),
            gpu_memory_mib=_quantiles(doc, [*where, "gpu_memory_mib"], spec.gpu_memory_mib),
        )
    except ModelError as exc:
        raise doc.error(where, str(exc)) from None


def _positive(doc: YamlDocument, path: list[str | int], spec: PositiveSpec) -> PositiveDistribution:
    weights = [c.weight for c in spec.components]
    _check_sum(doc, [*path, "components"], weights, "weights of the components")
    total = math.fsum(weights)
    components = tuple(
        LogNormalComponent(c.weight / total, math.log(c.median), c.sigma) for c in spec.components
    )
    atoms = tuple(Atom(a.value, a.share) for a in spec.atoms)
    if math.fsum(a.share for a in atoms) >= 1.0:
        raise doc.error([*path, "atoms"], "the shares of the atoms must sum to less than 1")
    return PositiveDistribution(atoms, LogNormalMixture(components), spec.resolution)


def _quantiles(doc: YamlDocument, path: list[str | int], spec: QuantilesSpec | None) -> Quantiles | None:
    if spec is None:
        return None
    for index, (low, high) in enumerate(zip(spec.quantiles, spec.quantiles[1:], strict=False)):
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise doc.error(
                [*path, "quantiles", index + 1],
                f"quantiles must be finite and non-decreasing, got {low} then {high}",
            )
    return Quantiles(tuple(spec.quantiles), spec.resolution)


def _arrivals(doc: YamlDocument, spec: ArrivalsSpec) -> ArrivalModel:
    for name in ("hour_of_day", "day_of_week"):
        values: list[float] = getattr(spec, name)
        for index, value in enumerate(values):
            if not (math.isfinite(value) and value > 0.0):
                raise doc.error(["arrivals", name, index], f"rate multipliers must be > 0, got {value}")
    try:
        return ArrivalModel(
            clock=spec.clock,
            start_hour_of_week=spec.start_hour_of_week,
            hour_of_day=tuple(spec.hour_of_day),
            day_of_week=tuple(spec.day_of_week),
            gap_s=_positive(doc, ["arrivals", "gap_s"], spec.gap_s),
            submit_resolution_s=spec.submit_resolution_s,
        )
    except ModelError as exc:
        raise doc.error(["arrivals"], str(exc)) from None


def dump_workload_model(model: WorkloadModel) -> str:
    """The model as the documented YAML text that :func:`load_workload_model` reads."""
    data: dict[str, Any] = {
        "version": model.version,
        "fitted_on": _fitted_on(model.fitted_on),
        "arrivals": _arrivals_data(model.arrivals),
        "classes": {c.name: _class_data(c) for c in model.classes},
    }
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return HEADER + body


def write_workload_model(model: WorkloadModel, path: Path) -> None:
    """Write the model file (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_text(dump_workload_model(model), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot write the file: {exc.strerror or exc}") from None


class _Flow(list[Any]):
    """A list written on one line: ``[1, 2, 3]``."""


class _FlowMap(dict[str, Any]):
    """A mapping written on one line: ``{tasks: 1, share: 0.5}``."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes :class:`_Flow` and :class:`_FlowMap` in flow style."""


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
_Dumper.add_representer(
    _FlowMap, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True)
)


def _num(value: float) -> float | int:
    """``value`` to :data:`_DIGITS` significant digits; whole numbers as integers."""
    rounded = float(f"{value:.{_DIGITS}g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) < 1e15 else rounded


def _fitted_on(f: FittedOn) -> dict[str, Any]:
    return {
        "source": f.source,
        "jobs": f.jobs,
        "span_s": _num(f.span_s),
        "capacity_gpus": f.capacity_gpus,
        "offered_load": None if f.offered_load is None else _num(f.offered_load),
        "heavy_gpu_hour_share": _num(f.heavy_gpu_hour_share),
    }


def _arrivals_data(a: ArrivalModel) -> dict[str, Any]:
    return {
        "clock": a.clock,
        "start_hour_of_week": _num(a.start_hour_of_week),
        "hour_of_day": _Flow(_num(v) for v in a.hour_of_day),
        "day_of_week": _Flow(_num(v) for v in a.day_of_week),
        "gap_s": _positive_data(a.gap_s),
        "submit_resolution_s": _num(a.submit_resolution_s),
    }


def _positive_data(p: PositiveDistribution) -> dict[str, Any]:
    return {
        "atoms": [_FlowMap(value=_num(a.value), share=_num(a.share)) for a in p.atoms],
        "resolution": _num(p.resolution),
        "components": [
            _FlowMap(weight=_num(c.weight), median=_num(c.median), sigma=_num(c.sigma))
            for c in p.mixture.components
        ],
    }


def _quantiles_data(q: Quantiles | None) -> dict[str, Any] | None:
    if q is None:
        return None
    return {"resolution": _num(q.resolution), "quantiles": _Flow(_num(v) for v in q.values)}


def _class_data(c: UserClass) -> dict[str, Any]:
    data: dict[str, Any] = {
        "users": c.users,
        "job_share": _num(c.job_share),
        "gpu_hour_share": _num(c.gpu_hour_share),
        "shapes": [
            _FlowMap(tasks=s.tasks, gpu_milli_per_task=s.gpu_milli_per_task, share=_num(s.share))
            for s in c.shapes
        ],
        "duration_s": _positive_data(c.duration_s),
    }
    for name, value in (("time_limit_ratio", c.time_limit_ratio), ("gpu_memory_mib", c.gpu_memory_mib)):
        if value is not None:
            data[name] = _quantiles_data(value)
    return data
