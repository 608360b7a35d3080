"""The built-in lab-mig cluster and workload: every MIG command of docs/mig.md runs out of the box."""

from __future__ import annotations

from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.config import BUILTIN_CLUSTERS, BUILTIN_WORKLOADS, load_cluster, load_workload
from loadmaster.scheduling.mig_plan import with_interactive_default


def test_lab_mig_is_built_in_and_its_notebooks_get_slices() -> None:
    assert "lab-mig" in BUILTIN_CLUSTERS
    assert "lab-mig" in BUILTIN_WORKLOADS
    cluster = load_cluster("lab-mig")
    assert cluster.mig, "the interactive pool has a mig section"
    jobs = with_interactive_default(load_workload("lab-mig", cluster).jobs, cluster.mig, cluster.nodes)
    sliced = [t for t in jobs if t.job.request.mig_profile]
    assert len(jobs) == 1000
    assert sliced, "some notebooks are converted to MIG slices"


def test_mig_plan_runs_on_the_built_ins() -> None:
    result = CliRunner().invoke(app, ["mig", "plan", "--cluster", "lab-mig", "--workload", "lab-mig"])
    assert result.exit_code == 0, result.output
    assert "MIG plan for lab-mig" in result.output
    assert "A30-24GB" in result.output
