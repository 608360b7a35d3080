"""Training families: workloads drawn from ranges of a workload model's parameters, so that a
checkpoint trains on many workloads rather than one and cannot memorise a single trace.

A family names a built-in workload (its cluster pools and defaults) and, for each parameter it
varies, a range around that workload's value. Each training episode draws its own point (the
offered load and the model's parameters) and then its jobs; each validation window draws from a
separate seeded stream, so the windows that select a checkpoint are never trained on.

**Held out.** The test workloads of ``benchmarks/rl_generalisation.py`` (``heldout-*`` and
``lab-habits``, at loads 0.9 and 1.1) each change one aspect of ``lab``: the size mix, the
over-asking, the run-time spread, the user population or the users' habits. :data:`EXCLUDED`
lists, for every parameter a test workload changes, its value there and a radius; the ranges of
:data:`LAB_FAMILY` stay outside every radius, so no draw comes near a test workload in what makes
it a test, at any load (:func:`excluded` names what a point is near; the unit tests check many
draws).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from loadmaster.errors import ConfigError
from loadmaster.workload import LabWorkloadParams

Mix = tuple[tuple[int, float], ...]
"""A size mix: (GPUs, weight) pairs, as ``LabWorkloadParams.gpu_weights``."""

VALIDATION_STREAM = 1_000_002
"""Seed stream of the validation windows (the same at every check, apart from training's)."""

LAB_MIX: Mix = LabWorkloadParams().gpu_weights
WIDE_SIZES = (16, 32, 64)
"""Sizes wider than one 8-GPU server of the ``lab`` cluster."""


@dataclass(frozen=True, slots=True)
class FamilyPoint:
    """One draw of a family: the offered load and the model parameters that differ from the base."""

    load: float
    gpu_weights: Mix
    limit_factor_median: float
    limit_factor_sigma: float
    light_sigma: float
    heavy_sigma: float
    users: int
    groups: int
    heavy_user_fraction: float
    heavy_user_job_share: float

    def params(self) -> dict[str, object]:
        """The ``params`` overrides of the base workload (``load_workload(params=...)``)."""
        return {
            "gpu_weights": self.gpu_weights,
            "limit_factor_median": self.limit_factor_median,
            "limit_factor_sigma": self.limit_factor_sigma,
            "light_sigma": self.light_sigma,
            "heavy_sigma": self.heavy_sigma,
            "users": self.users,
            "groups": self.groups,
            "heavy_user_fraction": self.heavy_user_fraction,
            "heavy_user_job_share": self.heavy_user_job_share,
        }


Range = tuple[float, float]

WIDE_MIX: Mix = ((1, 0.35), (2, 0.15), (4, 0.15), (8, 0.20), (16, 0.08), (32, 0.05), (64, 0.02))
"""``heldout-wide``'s size mix."""
NARROW_MIX: Mix = ((1, 0.75), (2, 0.12), (4, 0.08), (8, 0.05))
"""``heldout-narrow``'s size mix."""


@dataclass(frozen=True, slots=True)
class LabFamily:
    """Ranges around the ``lab`` workload model (its value in brackets); every draw is uniform in
    its range, or log-uniform where the parameter is a ratio or a count.

    The size mix is drawn as two shares: jobs on one GPU and jobs wider than one server (16-64
    GPUs); the 2-8 GPU jobs share the rest, and the wide jobs their share, in ``lab``'s
    proportions. Run-time spread, over-asking and population vary independently of each other."""

    workload: str = "lab"
    load: Range = (0.8, 1.2)
    """Offered load (``lab`` checkpoint: 0.9 and 1.1)."""
    one_gpu_share: Range = (0.48, 0.66)
    """Share of 1-GPU jobs (0.60)."""
    wide_share: Range = (0.02, 0.08)
    """Share of 16-64 GPU jobs (0.05)."""
    limit_factor_median: Range = (2.0, 4.0)
    """Median limit / run time, log-uniform (3.0)."""
    limit_factor_sigma: Range = (0.4, 0.8)
    """Its log-normal sigma (0.6)."""
    light_sigma: Range = (0.9, 1.5)
    """Run-time sigma of debugging runs (1.2)."""
    heavy_sigma: Range = (0.75, 1.25)
    """Run-time sigma of training runs (1.0)."""
    users: Range = (20, 100)
    """Users, log-uniform integers (40)."""
    groups: Range = (2, 6)
    """Groups, uniform integers (4)."""
    heavy_user_fraction: Range = (0.07, 0.15)
    """Share of users who are heavy (0.10)."""
    heavy_user_job_share: Range = (0.45, 0.75)
    """Share of jobs the heavy users submit (0.60)."""

    def draw(self, rng: np.random.Generator) -> FamilyPoint:
        """One point, from ``rng`` only (a fixed number of draws: deterministic for a seed)."""
        u = rng.random(11)
        return FamilyPoint(
            load=_uniform(self.load, u[0]),
            gpu_weights=size_mix(_uniform(self.one_gpu_share, u[1]), _uniform(self.wide_share, u[2])),
            limit_factor_median=_log_uniform(self.limit_factor_median, u[3]),
            limit_factor_sigma=_uniform(self.limit_factor_sigma, u[4]),
            light_sigma=_uniform(self.light_sigma, u[5]),
            heavy_sigma=_uniform(self.heavy_sigma, u[6]),
            users=round(_log_uniform(self.users, u[7])),
            groups=_integer(self.groups, u[8]),
            heavy_user_fraction=_uniform(self.heavy_user_fraction, u[9]),
            heavy_user_job_share=_uniform(self.heavy_user_job_share, u[10]),
        )


def _uniform(bounds: Range, u: float) -> float:
    return float(bounds[0] + u * (bounds[1] - bounds[0]))


def _integer(bounds: Range, u: float) -> int:
    """A uniform integer in [low, high] (both included)."""
    low, high = int(bounds[0]), int(bounds[1])
    return min(low + int(u * (high - low + 1)), high)


def _log_uniform(bounds: Range, u: float) -> float:
    return float(math.exp(math.log(bounds[0]) + u * (math.log(bounds[1]) - math.log(bounds[0]))))


def size_mix(one_gpu: float, wide: float) -> Mix:
    """``lab``'s size mix with ``one_gpu`` of the jobs on one GPU and ``wide`` on 16-64 GPUs; the
    other sizes keep their ``lab`` proportions within their group."""
    base = dict(LAB_MIX)
    middle = {g: w for g, w in base.items() if g != 1 and g not in WIDE_SIZES}
    spread = {g: w for g, w in base.items() if g in WIDE_SIZES}
    rest = 1.0 - one_gpu - wide
    weights = {1: one_gpu}
    weights |= {g: rest * w / sum(middle.values()) for g, w in middle.items()}
    weights |= {g: wide * w / sum(spread.values()) for g, w in spread.items()}
    return tuple((g, round(weights[g], 6)) for g in sorted(weights))


def mix_distance(a: Mix, b: Mix) -> float:
    """Total-variation distance between two size mixes (each normalised): the largest difference in
    the share of jobs of any set of sizes."""
    da, db = dict(a), dict(b)
    sa, sb = sum(da.values()), sum(db.values())
    return 0.5 * sum(abs(da.get(g, 0.0) / sa - db.get(g, 0.0) / sb) for g in set(da) | set(db))


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """Values of one parameter near a held-out test workload's: within ``radius`` of ``value``
    (a ratio for ``log`` parameters, total variation for a size mix)."""

    test: str
    parameter: str
    value: object
    radius: float
    log: bool = False

    def contains(self, params: Mapping[str, object]) -> bool:
        """Whether the parameters ``params`` (all of them, defaults included) lie inside."""
        mine = params[self.parameter]
        if self.parameter == "gpu_weights":
            return mix_distance(mine, self.value) < self.radius  # type: ignore[arg-type]
        if isinstance(self.value, bool):
            return mine == self.value
        x, centre = float(mine), float(self.value)  # type: ignore[arg-type]
        if self.log:
            return abs(math.log(x / centre)) < math.log(self.radius)
        return abs(x - centre) < self.radius


EXCLUDED: tuple[Neighbourhood, ...] = (
    Neighbourhood("heldout-wide", "gpu_weights", WIDE_MIX, 0.08),
    Neighbourhood("heldout-narrow", "gpu_weights", NARROW_MIX, 0.08),
    Neighbourhood("heldout-honest", "limit_factor_median", 1.3, 1.4, log=True),
    Neighbourhood("heldout-honest", "limit_factor_sigma", 0.2, 0.15),
    Neighbourhood("heldout-honest", "limit_factor_min", 1.05, 0.1),
    Neighbourhood("heldout-honest", "limit_hour_rounding_prob", 0.2, 0.3),
    Neighbourhood("heldout-overask", "limit_factor_median", 5.0, 1.2, log=True),
    Neighbourhood("heldout-overask", "limit_factor_sigma", 1.0, 0.15),
    Neighbourhood("heldout-overask", "limit_factor_max", 50.0, 2.0, log=True),
    Neighbourhood("heldout-spread", "light_sigma", 1.8, 0.2),
    Neighbourhood("heldout-spread", "heavy_sigma", 1.5, 0.2),
    Neighbourhood("heldout-crowd", "users", 200, 1.5, log=True),
    Neighbourhood("heldout-crowd", "groups", 8, 1.5),
    Neighbourhood("heldout-crowd", "heavy_user_fraction", 0.05, 0.015),
    Neighbourhood("heldout-crowd", "heavy_user_job_share", 0.3, 0.1),
    Neighbourhood("lab-habits", "user_habits", True, 0.0),
)
"""For each held-out test workload, every parameter in which it differs from ``lab``: its value
and the radius no draw may come within (at any load, whatever the other parameters)."""


def excluded(point: FamilyPoint) -> list[Neighbourhood]:
    """The held-out neighbourhoods ``point`` lies in (empty for every draw of a family)."""
    full = {**_defaults(), **point.params()}
    return [n for n in EXCLUDED if n.contains(full)]


def _defaults() -> dict[str, object]:
    base = LabWorkloadParams()
    return {name: getattr(base, name) for name in base.__dataclass_fields__}


FAMILIES: Mapping[str, LabFamily] = {"lab": LabFamily()}
"""Families by name (``loadmaster rl train --family``)."""


def family(name: str) -> LabFamily:
    """The family called ``name``; a ConfigError listing the known ones otherwise."""
    if name not in FAMILIES:
        raise ConfigError("--family", "family", f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def validation_seed(index: int) -> int:
    """The environment seed of the ``index``-th validation window (a stream of its own)."""
    return int(np.random.SeedSequence([VALIDATION_STREAM, index]).generate_state(1)[0])
