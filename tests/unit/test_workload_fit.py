"""Fitting workload models to traces: the EM, the KS distance, fit-then-sample on real traces, model files."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import reference_data
from loadmaster.cli import app
from loadmaster.config.workload_model import dump_workload_model, load_workload_model, parse_workload_model
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import ResourceType
from loadmaster.traces import read_trace
from loadmaster.traces.fitting import job_columns, sample_trace
from loadmaster.workload import LabWorkloadParams, PoolTarget, sample_lab_workload
from loadmaster.workload.fit import JobColumns, fit_positive, fit_workload
from loadmaster.workload.fitted import WorkloadModel, sample_workload
from loadmaster.workload.goodness import KS_TARGET, ks_distance, qq_points
from loadmaster.workload.mixture import fit_lognormal_mixture, select_lognormal_mixture

A100 = ResourceType(
    name="a100",
    gpu_model="A100-80GB",
    gpu_memory_mib=81_920,
    cpu_milli_per_gpu=12_000,
    memory_mib_per_gpu=120_000,
)
MONDAY_EPOCH_S = 4 * 86_400.0
"""1970-01-05 00:00 UTC, a Monday: the lab generator's clock starts on a Monday."""


# --- builders -----------------------------------------------------------------------------------


def mixture_sample(n: int, parts: list[tuple[float, float, float]], seed: int = 0) -> np.ndarray:
    """``n`` draws of a log-normal mixture given as (weight, mu, sigma) parts."""
    rng = np.random.default_rng(seed)
    weights = np.array([w for w, _, _ in parts])
    which = rng.choice(len(parts), size=n, p=weights)
    mu = np.array([m for _, m, _ in parts])[which]
    sigma = np.array([s for _, _, s in parts])[which]
    return np.exp(mu + sigma * rng.standard_normal(n))


@lru_cache(maxsize=1)
def lab_columns() -> JobColumns:
    """A lab-generator trace (4,000 jobs, wall clock from a Monday) as fit columns."""
    pool = PoolTarget("train", A100, capacity_gpus=128, gpus_per_node=8, share=1.0, max_job_gpus=64)
    jobs = sample_lab_workload(
        LabWorkloadParams(), [pool], n_jobs=4000, load=0.8, rng=np.random.default_rng(5)
    )
    return JobColumns(
        user=np.array([t.job.user for t in jobs], dtype=object),
        submit_s=np.array([t.job.submit_s for t in jobs]),
        duration_s=np.array([t.duration_s for t in jobs]),
        time_limit_s=np.array([t.job.time_limit_s for t in jobs], dtype=float),
        tasks=np.array([t.job.tasks for t in jobs], dtype=float),
        gpu_milli_per_task=np.array([t.job.request.gpu_milli for t in jobs], dtype=float),
        gpu_memory_mib=np.array([t.job.request.gpu_memory_mib for t in jobs], dtype=float),
        source="lab",
        origin_epoch_s=MONDAY_EPOCH_S,
        capacity_gpus=128,
    )


@lru_cache(maxsize=1)
def lab_model() -> WorkloadModel:
    return fit_workload(lab_columns())


@lru_cache(maxsize=1)
def lublin() -> tuple[JobColumns, WorkloadModel]:
    columns = job_columns(read_trace(reference_data("swf/lublin_256.swf")))
    return columns, fit_workload(columns)


def marginal_ks(columns: JobColumns, model: WorkloadModel, seed: int) -> dict[str, float]:
    sample = sample_workload(model, len(columns), np.random.default_rng(seed))
    return {
        "gpus": ks_distance(columns.gpus, sample.gpus),
        "duration": ks_distance(columns.duration_s, sample.duration_s),
        "interarrival": ks_distance(np.diff(np.sort(columns.submit_s)), np.diff(sample.submit_s)),
    }


# --- the EM -------------------------------------------------------------------------------------


def test_em_recovers_a_known_two_component_mixture() -> None:
    x = mixture_sample(20_000, [(0.3, 2.0, 0.5), (0.7, 6.0, 0.8)])
    fit = fit_lognormal_mixture(x, 2)
    (low, high) = fit.mixture.components
    assert low.weight == pytest.approx(0.3, abs=0.02)
    assert (low.mu, low.sigma) == (pytest.approx(2.0, abs=0.05), pytest.approx(0.5, abs=0.05))
    assert (high.mu, high.sigma) == (pytest.approx(6.0, abs=0.05), pytest.approx(0.8, abs=0.05))


def test_em_recovers_three_components_and_bic_picks_three() -> None:
    truth = [(0.2, 1.0, 0.4), (0.5, 4.0, 0.6), (0.3, 8.0, 0.5)]
    fits = select_lognormal_mixture(mixture_sample(30_000, truth, seed=1))
    best = fits[0].mixture.components
    assert len(best) == 3
    for got, (weight, mu, sigma) in zip(best, truth, strict=True):
        assert got.weight == pytest.approx(weight, abs=0.02)
        assert got.mu == pytest.approx(mu, abs=0.05)
        assert got.sigma == pytest.approx(sigma, abs=0.05)


def test_bic_prefers_one_component_for_a_plain_log_normal() -> None:
    fits = select_lognormal_mixture(mixture_sample(5000, [(1.0, 3.0, 1.0)], seed=2))
    assert len(fits[0].mixture.components) == 1
    assert [f.bic for f in fits] == sorted(f.bic for f in fits)


@pytest.mark.parametrize(
    ("values", "k", "match"),
    [
        (np.array([1.0, -2.0, 3.0, 4.0]), 1, "> 0"),
        (np.array([1.0, np.nan, 3.0]), 1, "> 0"),
        (np.array([1.0, 2.0, 3.0]), 2, "at least 4"),
        (np.array([1.0, 2.0]), 5, "between 1 and 4"),
    ],
)
def test_em_rejects_bad_input(values: np.ndarray, k: int, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        fit_lognormal_mixture(values, k)


def test_point_masses_become_atoms() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([np.zeros(100), np.full(300, 121.0), np.round(rng.lognormal(6.0, 1.0, 600)) + 1])
    fitted = fit_positive(values)
    atoms = {a.value: a.share for a in fitted.atoms}
    assert atoms[0.0] == pytest.approx(0.1)
    assert atoms[121.0] == pytest.approx(0.3, abs=0.005)
    drawn = fitted.sample(20_000, np.random.default_rng(4))
    assert ks_distance(values, drawn) < 0.03
    assert np.all(drawn == np.round(drawn))  # whole-number data are drawn whole


# --- the KS distance ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], 0.0),
        ([1.0, 2.0], [3.0, 4.0], 1.0),
        # continuous: at x = 2, F_a = 2/4 and F_b = 0; at x = 4, F_a = 1 and F_b = 2/4
        ([1.0, 2.0, 3.0, 4.0], [3.0, 4.0, 5.0, 6.0], 0.5),
        # at x = 1.5: F_a = 1/2, F_b = 0; elsewhere the gap is smaller
        ([1.0, 2.0], [1.7, 1.8, 2.5], 0.5),
        # discrete with ties: F_a(1) = 3/4, F_b(1) = 1/4
        ([1.0, 1.0, 1.0, 2.0], [1.0, 2.0, 2.0, 2.0], 0.5),
        # the same distribution over {1, 2} at different sample sizes: no gap at any jump point
        ([1.0, 2.0], [1.0, 1.0, 2.0, 2.0], 0.0),
        # discrete, three sizes: F_a = (.2, .6, 1), F_b = (.5, .75, 1) at 1, 2, 8
        ([1, 2, 2, 8, 8], [1, 1, 2, 8], 0.3),
        # NaNs are ignored
        ([1.0, np.nan, 2.0], [1.0, 2.0], 0.0),
    ],
)
def test_ks_distance_matches_hand_computed_values(a: list[float], b: list[float], expected: float) -> None:
    assert ks_distance(np.array(a, dtype=float), np.array(b, dtype=float)) == pytest.approx(expected)
    assert ks_distance(np.array(b, dtype=float), np.array(a, dtype=float)) == pytest.approx(expected)


def test_ks_distance_needs_values() -> None:
    with pytest.raises(ModelError, match="at least one finite value"):
        ks_distance(np.array([np.nan]), np.array([1.0]))


def test_qq_points_of_discrete_data_are_observed_values() -> None:
    trace_q, sample_q = qq_points(np.array([1.0, 1.0, 8.0, 8.0]), np.array([1.0, 8.0]), points=4)
    assert set(trace_q) <= {1.0, 8.0}
    assert set(sample_q) <= {1.0, 8.0}


# --- fit then sample on real traces --------------------------------------------------------------


def test_lublin_fit_then_sample_stays_within_ks_target() -> None:
    columns, model = lublin()
    ks = marginal_ks(columns, model, seed=0)
    assert max(ks.values()) < KS_TARGET, ks
    assert model.arrivals.clock == "relative"
    assert model.fitted_on.capacity_gpus == 256
    assert not model.has_time_limits


def test_lab_trace_fit_then_sample_stays_within_ks_target() -> None:
    columns, model = lab_columns(), lab_model()
    ks = marginal_ks(columns, model, seed=0)
    assert max(ks.values()) < KS_TARGET, ks
    sample = sample_workload(model, len(columns), np.random.default_rng(1))
    ratio = ks_distance(columns.time_limit_s / columns.duration_s, sample.time_limit_s / sample.duration_s)
    assert ratio < KS_TARGET
    assert ks_distance(columns.gpu_memory_mib, sample.gpu_memory_mib) < KS_TARGET


def test_lab_trace_classes_and_cycles_are_recovered() -> None:
    model = lab_model()
    heavy, light = model.classes
    # The generator's 4 heavy users submit 60% of the jobs; a light user or two may join them
    # to reach 80% of the GPU-hours.
    assert heavy.name == "heavy"
    assert 4 <= heavy.users <= 8
    assert heavy.users + light.users == 40
    assert heavy.job_share == pytest.approx(0.6, abs=0.06)
    assert heavy.gpu_hour_share >= 0.8
    arrivals = model.arrivals
    assert arrivals.clock == "wall"
    assert int(np.argmax(arrivals.hour_of_day)) in range(11, 18)  # the generator peaks at 14:00
    weekday, weekend = np.mean(arrivals.day_of_week[:5]), np.mean(arrivals.day_of_week[5:])
    assert weekend / weekday == pytest.approx(0.4, abs=0.1)


def test_sampling_is_deterministic_and_hits_the_target_load() -> None:
    model = lab_model()
    first = sample_workload(model, 1500, np.random.default_rng(9), load=0.6, capacity_gpus=64)
    second = sample_workload(model, 1500, np.random.default_rng(9), load=0.6, capacity_gpus=64)
    assert np.array_equal(first.submit_s, second.submit_s)
    assert first.user == second.user
    span = first.submit_s[-1] - first.submit_s[0]
    assert float(np.sum(first.gpus * first.duration_s)) / (64 * span) == pytest.approx(0.6, rel=1e-3)
    assert np.all(np.diff(first.submit_s) >= 0.0)


def test_a_load_needs_a_cluster_size() -> None:
    columns, _ = lublin()
    model = fit_workload(JobColumns(**{**columns.__dict__, "capacity_gpus": None}))
    with pytest.raises(ModelError, match="capacity_gpus"):
        sample_workload(model, 100, np.random.default_rng(0), load=0.5)


def test_a_sample_is_a_canonical_trace() -> None:
    sample = sample_workload(lab_model(), 50, np.random.default_rng(0))
    trace = sample_trace(sample, {"source": "m.yaml"})
    assert len(trace) == 50
    assert trace.column("job_id")[0] == "s000001"
    assert np.allclose(trace.gpus_per_job(), sample.gpus)
    assert np.all(np.isfinite(trace.column("time_limit_s")))


# --- model files --------------------------------------------------------------------------------


def test_model_yaml_round_trips() -> None:
    model = lab_model()
    text = dump_workload_model(model)
    again = parse_workload_model(text)
    assert dump_workload_model(again) == text
    assert text.startswith("# loadmaster workload model")
    assert "version: 1" in text
    assert [c.name for c in again.classes] == ["heavy", "light"]
    for before, after in zip(model.classes, again.classes, strict=True):
        assert after.job_share == pytest.approx(before.job_share, rel=1e-5)
        for c0, c1 in zip(
            before.duration_s.mixture.components, after.duration_s.mixture.components, strict=True
        ):
            assert (c1.weight, c1.mu, c1.sigma) == pytest.approx(
                (c0.weight, c0.mu, c0.sigma), rel=1e-5, abs=1e-6
            )
    assert again.arrivals.hour_of_day == pytest.approx(model.arrivals.hour_of_day, rel=1e-5)


def _bad_model(tmp_path: Path, old: str, new: str) -> Path:
    """The lab model's file with ``old`` replaced by ``new`` (``H`` stands for the heavy users' count)."""
    heavy = str(lab_model().classes[0].users)
    old, new = old.replace("H", heavy), new.replace("H", heavy)
    text = dump_workload_model(lab_model())
    assert old in text
    path = tmp_path / "model.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def _line_of(path: Path, fragment: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line)


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("version: 1", "version: 2", "version", "unsupported model version 2"),
        ("clock: wall", "clock: sundial", "arrivals.clock", "sundial"),
        (
            "heavy:\n    users: H\n",
            "heavy:\n    users: 0\n",
            "classes.heavy.users",
            "greater than or equal to 1",
        ),
        (
            "  heavy:\n    users: H\n",
            "  heavy:\n    users: H\n    colour: red\n",
            "classes.heavy.colour",
            "unknown",
        ),
        ("job_share: 0.", "job_share: 0.9", "classes", "job_share of the classes must sum to 1"),
    ],
)
def test_a_bad_model_file_names_the_line_and_field(
    tmp_path: Path, old: str, new: str, field: str, message: str
) -> None:
    path = _bad_model(tmp_path, old, new)
    with pytest.raises(ConfigError, match=message) as caught:
        load_workload_model(path)
    error = caught.value
    assert error.field == field
    assert error.source.startswith(f"{path}:")
    line = int(error.source.rsplit(":", 1)[1])
    if field != "classes":
        assert line == _line_of(path, new.strip().splitlines()[-1])


def test_a_negative_sigma_names_its_component(tmp_path: Path) -> None:
    text = dump_workload_model(lab_model())
    marker = "sigma: "
    start = text.index(marker, text.index("duration_s:"))
    end = text.index("}", start)
    path = tmp_path / "model.yaml"
    path.write_text(text[:start] + "sigma: -1" + text[end:])
    with pytest.raises(ConfigError, match="greater than 0") as caught:
        load_workload_model(path)
    assert caught.value.field == "classes.heavy.duration_s.components[0].sigma"
    assert caught.value.source == f"{path}:{_line_of(path, 'sigma: -1')}"


def test_a_short_hour_of_day_list_is_rejected(tmp_path: Path) -> None:
    text = dump_workload_model(lab_model())
    start = text.index("hour_of_day: [") + len("hour_of_day: [")
    path = tmp_path / "model.yaml"
    path.write_text(text[:start] + text[text.index(",", start) + 2 :])
    with pytest.raises(ConfigError, match="at least 24") as caught:
        load_workload_model(path)
    assert caught.value.field == "arrivals.hour_of_day"


# --- the command line ---------------------------------------------------------------------------


def test_cli_fit_writes_model_report_and_prints_ks(tmp_path: Path) -> None:
    trace_path = reference_data("swf/lublin_256.swf")
    model_path = tmp_path / "model.yaml"
    result = CliRunner().invoke(app, ["workload", "fit", str(trace_path), "-o", str(model_path)])
    assert result.exit_code == 0, result.output
    assert "KS distance" in result.output
    assert "Inter-arrival time (s)" in result.output
    report = tmp_path / "model-report"
    markdown = (report / "fit_report.md").read_text()
    assert "| GPUs per job |" in markdown
    assert "**no**" not in markdown
    for png in ("fit_qq.png", "fit_cdf.png"):
        assert (report / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert load_workload_model(model_path).fitted_on.source == "lublin_256.swf"


def test_cli_sample_is_deterministic_and_targets_the_load(tmp_path: Path) -> None:
    model_path = tmp_path / "model.yaml"
    model_path.write_text(dump_workload_model(lab_model()))
    tables = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.parquet"
        args = ["workload", "sample", str(model_path), "--jobs", "400", "--load", "0.7", "--gpus", "32"]
        result = CliRunner().invoke(app, [*args, "--seed", "4", "-o", str(out)])
        assert result.exit_code == 0, result.output
        tables.append(pq.read_table(out))
    assert tables[0].equals(tables[1])
    table = tables[0]
    assert table.num_rows == 400
    gpus = np.asarray(table["tasks"]) * np.asarray(table["gpu_milli_per_task"]) / 1000.0
    submit = np.asarray(table["submit_s"])
    load = float(np.sum(gpus * np.asarray(table["duration_s"]))) / (32 * (submit.max() - submit.min()))
    assert math.isclose(load, 0.7, rel_tol=0.01)


def test_cli_sample_without_a_cluster_size_says_so(tmp_path: Path) -> None:
    columns = lab_columns()
    model = fit_workload(JobColumns(**{**columns.__dict__, "capacity_gpus": None}))
    model_path = tmp_path / "model.yaml"
    model_path.write_text(dump_workload_model(model))
    args = [
        "workload",
        "sample",
        str(model_path),
        "--jobs",
        "10",
        "--load",
        "0.5",
        "-o",
        str(tmp_path / "s.parquet"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "--gpus" in str(result.exception)
