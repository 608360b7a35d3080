"""tools/openb-draws (Go, standard library only) writes exactly the shipped reference draws.

Needs the Go toolchain (Debian ``golang-go``, which .ci/run installs): a failure
without it, naming the command that installs it.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

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
