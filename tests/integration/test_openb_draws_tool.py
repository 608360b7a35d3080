"""tools/openb-draws (Go, standard library only) writes exactly the shipped reference draws.

Needs the Go toolchain (Debian ``golang-go``, which .ci/run installs): a failure
without it, naming the command that installs it.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import reference_data, system_tool

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "openb-draws"
SHIPPED = ROOT / "benchmarks" / "workloads" / "openb_reference_draws.json.gz"


def _go() -> str:
    return system_tool("go")


def _run(go: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GOCACHE": str(tmp_path / "gocache"), "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    return subprocess.run(
        [go, "run", ".", *args], cwd=TOOL, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_tool_writes_the_shipped_draws(tmp_path: Path) -> None:
    go = _go()
    pods = reference_data("openb/openb_pod_list_default.csv")
    done = _run(go, tmp_path, "-pods", str(pods), "-gpus", "6212", "-nodes", "1213", "-seeds", "42-51")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(gzip.decompress(SHIPPED.read_bytes()))


def test_the_tool_names_a_bad_input(tmp_path: Path) -> None:
    go = _go()
    bad = tmp_path / "pods.csv"
    bad.write_text("name,num_gpu,gpu_milli\npod-0,one,1000\n")
    done = _run(go, tmp_path, "-pods", str(bad), "-gpus", "1", "-nodes", "1")
    assert done.returncode != 0  # `go run` reports the tool's exit status 2 as its own 1
    assert f"{bad} line 2: num_gpu and gpu_milli must be numbers" in done.stderr


def test_a_pod_list_asking_more_than_the_ratio_is_tuned_down(tmp_path: Path) -> None:
    # As the authors' tuneDownPods: pods leave the shuffled list at random until the rest ask for
    # no more than 1.3 x the GPUs; none are drawn. Ten 1-GPU pods, 4 GPUs: 5 leave.
    go = _go()
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},1,1,1,1000\n" for i in range(10))
    )
    done = _run(go, tmp_path, "-pods", str(pods), "-gpus", "4", "-nodes", "1", "-seeds", "42")
    assert done.returncode == 0, done.stderr
    seed = json.loads(done.stdout)["seeds"][0]
    assert sorted(seed["shuffle"]) == list(range(10))
    assert len(seed["dropped"]) == len(set(seed["dropped"])) == 5
    assert seed["drawn"] == []


def _benchmark(tmp_path: Path, *args: str) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "benchmarks" / "fgd_openb.py"), "--seeds", "1", "--workers", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "GOCACHE": str(tmp_path / "gocache")}
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(
        (tmp_path / "out" / "fgd_openb_openb_pod_list_sample.json").read_text()
    )
    return result


def test_the_fgd_benchmark_runs_any_pod_list_with_draws_written_afresh(tmp_path: Path) -> None:
    # Another pod list than the shipped draws' (the openb sample, with GPU models) on two nodes: the
    # benchmark writes the authors' draws for it with tools/openb-draws, and compares with the rows of
    # --expected for that list's name (here our own Best-fit curve, written back as the authors').
    _go()
    fixtures = ROOT / "tests" / "fixtures" / "traces"
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,4,V100M16\nn1,64000,262144,2,T4\n")
    args = ["--pods", str(fixtures / "openb_pod_list_sample.csv"), "--nodes", str(nodes)]
    args += ["--expected", str(tmp_path / "none.csv"), "--out", str(tmp_path / "out")]
    first = _benchmark(tmp_path, *args)
    assert first["published"] == {} and "openb_pod_list_sample" in first["setup"]
    curve = first["curves_ours"]["Best-fit"]
    expected = tmp_path / "expected.csv"
    header = "workload,sc_policy,tune,seed,total_gpus," + ",".join(str(level) for level in range(131))
    cells = ",".join("" if v is None or v != v else f"{v:.2f}" for v in curve)
    expected.write_text(f"{header}\nopenb_pod_list_sample,05-BestFit,1.3,42,6,{cells}\n")
    args[args.index("--expected") + 1] = str(expected)
    second = _benchmark(tmp_path, *args)
    assert set(second["published"]) == {"Best-fit"}
    assert second["per_policy"]["Best-fit"]["seeds_identical_to_published"] == 1
