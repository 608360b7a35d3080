"""The learned policy's scoring network, in numpy, and its checkpoint format.

Training happens in PyTorch (``loadmaster.rl``); serving must not need it: the
``learned`` plugin runs in the simulator, the live demo and the Kubernetes
binding, where a multi-GB dependency would be a burden. So a checkpoint is a
plain ``.npz`` of the score network's layers plus a JSON ``meta`` entry, and
this module runs the forward pass with numpy. ``loadmaster.rl.agent`` builds
the same network in torch and tests check that both agree.

**Network.** Permutation-invariant over jobs: each job's score is an MLP
(tanh) of its own inputs (:func:`job_inputs`) concatenated with the shared
context (:func:`context_inputs`). A softmax over the scores of the jobs that
can start is the policy; the plugin ranks by score.

This is the one place the scheduling core reads a file, and only when a
profile is built, never during a cycle: a checkpoint is configuration, like a
profile's YAML, but binary.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ConfigError
from loadmaster.scheduling.observe import ObservationSpec

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

SCORE_DECIMALS = 9
"""Scores are rounded to this many decimals. The forward pass runs in float64 and its last bits
depend on the CPU (BLAS kernels and numpy's SIMD ``tanh``/``log1p`` differ between AVX2 and
AVX-512 machines); rounding makes two rows with the same inputs tie exactly on every machine, so
the tie-break (submit time, id) decides, and the same trace gives the same schedule everywhere."""

JOB_INPUTS = ("gpus", "log_limit_h", "log_wait", "log_wait_over_limit", "log_area", "user_usage")
"""What the network reads of each job (derived from the job row of :mod:`observe`): the inputs of
every checkpoint whose ``meta`` names no ``job_inputs``."""
HISTORY_INPUTS = ("user_run_over_limit", "log_predicted_h", "user_history")
"""Inputs from the job's user's recent finished jobs (:func:`observe.history_features`): the median
run time over limit, the log of the predicted run time (limit x that ratio) in hours, and how much
history there is (0 to 1). A user with none reads (1, log of the limit, 0): the limit is the guess."""
WITH_HISTORY = (*JOB_INPUTS, *HISTORY_INPUTS)
"""The job inputs of checkpoints trained with user history (``meta.job_inputs``)."""
KNOWN_JOB_INPUTS = frozenset(WITH_HISTORY)

BUILTIN = {
    "lab": "learned-lab.npz",
    "lab-fair": "learned-lab-fair.npz",
    "lab-family": "learned-lab-family.npz",
    "lab-family-backfill": "learned-lab-family-backfill.npz",
    "lublin": "learned-lublin.npz",
    "lublin-backfill": "learned-lublin-backfill.npz",
    "lab-habits": "learned-lab-habits.npz",
}
"""Checkpoints shipped in ``loadmaster/data/models``: name -> file."""

FORMAT = "loadmaster-policy/1"
JOBS = "jobs"
"""``meta.inputs`` of a checkpoint that scores jobs (:data:`JOB_INPUTS` and the context), as the
``learned`` plugin needs; other trainers record their own rows and ``meta.input_width``."""


def job_inputs(jobs: F32, history: F32 | None = None, names: tuple[str, ...] = JOB_INPUTS) -> F32:
    """Network inputs per job from job rows (columns as ``observe.JOB_FEATURES``) and, for the
    :data:`HISTORY_INPUTS`, user-history rows (``observe.HISTORY_FEATURES``), in ``names``' order.

    Logs, because time limits and waits span minutes to weeks; the wait over
    the time limit is how far the job's slowdown has already grown, the
    quantity bounded slowdown punishes. :data:`JOB_INPUTS` are computed exactly
    as before the history inputs existed, so older checkpoints score the same.
    """
    base = _base_inputs(jobs)
    if names == JOB_INPUTS:
        return base
    if history is None:
        history = np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(jobs), 1))
    ratio = history[:, 0].astype(np.float64)
    limit_h = jobs[:, 2].astype(np.float64)
    extra = np.stack([ratio, np.log1p(limit_h * ratio), history[:, 1].astype(np.float64)], axis=1)
    every = np.concatenate([base, extra.astype(np.float32)], axis=1)
    return every[:, [WITH_HISTORY.index(name) for name in names]]


def _base_inputs(jobs: F32) -> F32:
    rows = jobs.astype(np.float64)
    gpus, limit_h, wait, usage = rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4]
    return np.stack(
        [
            gpus,
            np.log1p(limit_h),
            np.log1p(wait),
            np.log1p(wait / np.maximum(limit_h, 0.01)),
            np.log1p(8.0 * gpus * limit_h),
            usage,
        ],
        axis=1,
    ).astype(np.float32)


def context_inputs(nodes: F32, globals_: F32) -> F32:
    """Shared context: mean and max over nodes of the free-ahead curve, the share of wholly free
    nodes, and the global features except ``jobs_left`` (which exists only in an episode)."""
    points = nodes.astype(np.float64)
    glob = globals_.astype(np.float64)
    if len(points) == 0:
        pooled = np.zeros(2 * points.shape[1] + 1)
    else:
        pooled = np.concatenate([points.mean(axis=0), points.max(axis=0), [np.mean(points[:, 0] >= 0.999)]])
    return np.concatenate([pooled, [np.log1p(glob[0]), glob[1], glob[2], glob[3]]]).astype(np.float32)


def context_size(spec: ObservationSpec) -> int:
    """Length of :func:`context_inputs` for ``spec``."""
    return 2 * (spec.horizon_steps + 1) + 1 + 4


@dataclass(frozen=True, eq=False)
class PolicyNet:
    """The score network: ``layers`` are (weight (in, out), bias (out,)) pairs, tanh between."""

    layers: tuple[tuple[F32, F32], ...]
    spec: ObservationSpec
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def job_input_names(self) -> tuple[str, ...]:
        """The job inputs this network reads: ``meta.job_inputs``, else :data:`JOB_INPUTS`."""
        return tuple(self.meta.get("job_inputs", JOB_INPUTS))

    @property
    def uses_history(self) -> bool:
        """Whether any input comes from the user's history (the caller then passes ``history``)."""
        return any(name in HISTORY_INPUTS for name in self.job_input_names)

    def scores(self, jobs: F32, nodes: F32, globals_: F32, history: F32 | None = None) -> F64:
        """One score per job row (higher: start sooner)."""
        return self.score_inputs(self.inputs(jobs, nodes, globals_, history))

    def inputs(self, jobs: F32, nodes: F32, globals_: F32, history: F32 | None = None) -> F32:
        """The network's input rows: each job's inputs with the shared context, (jobs, inputs).
        ``history``: the jobs' user-history rows (``observe.history_features``); None reads as
        users with no history."""
        ctx = context_inputs(nodes, globals_)
        own = job_inputs(jobs, history, self.job_input_names)
        return np.concatenate([own, np.broadcast_to(ctx, (len(jobs), len(ctx)))], axis=1)

    def score_inputs(self, x: F32) -> F64:
        """Scores of input rows from :meth:`inputs`, in float64 rounded to :data:`SCORE_DECIMALS`
        (float32 sums differ in the 7th digit between CPUs, enough to reorder near-equal jobs)."""
        if len(x) == 0:
            return np.zeros(0)
        h = x.astype(np.float64)
        layers = self._layers64
        for i, (weight, bias) in enumerate(layers):
            h = h @ weight + bias
            if i < len(layers) - 1:
                h = np.tanh(h)
        return np.round(h[:, 0], SCORE_DECIMALS)

    @cached_property
    def _layers64(self) -> tuple[tuple[F64, F64], ...]:
        """The layers in float64, made once (the scheduler scores every cycle's queue)."""
        return tuple((w.astype(np.float64), b.astype(np.float64)) for w, b in self.layers)


def save_policy(
    target: io.BufferedIOBase | io.BytesIO,
    layers: list[tuple[F32, F32]],
    spec: ObservationSpec,
    meta: dict[str, Any],
    extra: dict[str, F32] | None = None,
) -> None:
    """Write a checkpoint: score layers, optional ``extra`` arrays (the value head), JSON meta."""
    arrays: dict[str, Any] = {}
    for i, (weight, bias) in enumerate(layers):
        arrays[f"score.{i}.weight"] = np.asarray(weight, dtype=np.float32)
        arrays[f"score.{i}.bias"] = np.asarray(bias, dtype=np.float32)
    for key, value in (extra or {}).items():
        arrays[key] = np.asarray(value, dtype=np.float32)
    full = {
        "format": FORMAT,
        "spec": {
            "window": spec.window,
            "horizon_steps": spec.horizon_steps,
            "horizon_step_s": spec.horizon_step_s,
            "wait_scale_s": spec.wait_scale_s,
        },
        **meta,
    }
    arrays["meta"] = np.array(json.dumps(full, sort_keys=True))
    np.savez_compressed(target, **arrays)


def read_policy(data: bytes, source: str) -> tuple[PolicyNet, dict[str, F32]]:
    """Parse checkpoint bytes; errors name ``source`` and what is wrong. Returns the net and every
    array of the file (so training can resume with the value head)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError) as err:
        raise ConfigError(source, "checkpoint", f"not a loadmaster policy (.npz): {err}") from err
    if "meta" not in arrays:
        raise ConfigError(source, "meta", "missing: not a loadmaster policy checkpoint")
    meta = json.loads(str(arrays.pop("meta")))
    if meta.get("format") != FORMAT:
        raise ConfigError(source, "meta.format", f"expected {FORMAT!r}, got {meta.get('format')!r}")
    spec = ObservationSpec(**meta["spec"])
    layers: list[tuple[F32, F32]] = []
    while f"score.{len(layers)}.weight" in arrays:
        i = len(layers)
        layers.append((arrays[f"score.{i}.weight"], arrays[f"score.{i}.bias"]))
    if not layers:
        raise ConfigError(source, "score.0.weight", "missing: the checkpoint has no score network")
    inputs = meta.get("inputs", JOBS)
    names = _job_input_names(meta, source)
    expected = len(names) + context_size(spec) if inputs == JOBS else meta.get("input_width")
    if not isinstance(expected, int):
        raise ConfigError(source, "meta.input_width", f"the width of {inputs!r} rows is missing")
    if layers[0][0].shape[0] != expected or layers[-1][0].shape[1] != 1:
        raise ConfigError(
            source,
            "score.0.weight",
            f"shape {layers[0][0].shape} does not take {expected} inputs to one score",
        )
    return PolicyNet(tuple(layers), spec, meta), arrays


def _job_input_names(meta: dict[str, Any], source: str) -> tuple[str, ...]:
    """``meta.job_inputs`` checked (absent: :data:`JOB_INPUTS`, what every older checkpoint read)."""
    names = meta.get("job_inputs", list(JOB_INPUTS))
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(source, "meta.job_inputs", f"a list of input names, got {names!r}")
    unknown = sorted(set(names) - KNOWN_JOB_INPUTS)
    if unknown or len(set(names)) != len(names):
        allowed = ", ".join(WITH_HISTORY)
        raise ConfigError(source, "meta.job_inputs", f"distinct names among {allowed}; got {names!r}")
    return tuple(names)


@lru_cache(maxsize=16)
def load_policy(checkpoint: str) -> PolicyNet:
    """A shipped checkpoint by name (:data:`BUILTIN`) or a ``.npz`` file path (read once, cached)."""
    if checkpoint in BUILTIN:
        data = (resources.files("loadmaster.data") / "models" / BUILTIN[checkpoint]).read_bytes()
        return read_policy(data, f"builtin checkpoint {checkpoint!r}")[0]
    if not checkpoint.endswith(".npz"):
        allowed = ", ".join(sorted(BUILTIN))
        raise ConfigError(checkpoint, "checkpoint", f"a shipped name ({allowed}) or a path to a .npz file")
    try:
        with open(checkpoint, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise ConfigError(checkpoint, "checkpoint", f"cannot read: {err.strerror}") from err
    return _jobs_policy(read_policy(data, checkpoint)[0], checkpoint)


def _jobs_policy(policy: PolicyNet, source: str) -> PolicyNet:
    """``policy``, if it scores jobs; a checkpoint trained on other rows is refused by name."""
    inputs = policy.meta.get("inputs", JOBS)
    if inputs != JOBS:
        raise ConfigError(source, "meta.inputs", f"scores {inputs!r} rows; the learned plugin needs {JOBS!r}")
    return policy
