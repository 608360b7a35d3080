"""``loadmaster mig plan``: per-GPU MIG layouts for a cluster's MIG pools, from a workload's demand."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.output import console
from loadmaster.config import load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.scheduling.mig_plan import demand_from_jobs, plan_layouts, with_interactive_default
from loadmaster.sim.mig import configured_layouts

app = typer.Typer(no_args_is_help=True, help="MIG layouts: plan them for a demand mix.")


@app.command("plan")
def plan(
    cluster: Annotated[
        str, typer.Option(help="Cluster spec file (with a pool's mig section), or a built-in")
    ],
    workload: Annotated[
        str, typer.Option(help="Workload spec file, or a built-in, whose MIG demand to serve")
    ],
) -> None:
    """Print each MIG pool's planned layouts, the demand they serve and the gain over the configured ones."""
    spec = load_cluster(cluster)
    if not spec.mig:
        raise ConfigError(spec.source, "pools", "no pool has a mig section; nothing to plan")
    jobs = with_interactive_default(load_workload(workload, spec).jobs, spec.mig, spec.nodes)
    demand = demand_from_jobs(jobs)
    layouts = configured_layouts(spec.nodes, spec.mig)
    table = Table(title=f"MIG plan for {spec.name}: demand {_mix(demand)} (instances at once)")
    for column in ("pool", "GPU model", "GPUs", "planned layouts", "served", "now", "gain"):
        table.add_column(column)
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for key, (model, _) in sorted(layouts.items()):
        groups.setdefault((spec.nodes.nodes[key[0]].pool, model.name), []).append(key)
    for (pool, model_name), keys in groups.items():
        model = layouts[keys[0]][0]
        result = plan_layouts(model, len(keys), demand, [layouts[k][1] for k in keys])
        planned = "\n".join(f"{n} x {text}" for text, n in result.summary().items())
        table.add_row(
            pool,
            model_name,
            str(len(keys)),
            planned,
            f"{result.served_slices:.1f} of {result.demand_slices:.1f} slices",
            f"{result.current_served_slices:.1f}",
            f"{result.gain_slices:+.1f} slices",
        )
    console.print(table)


def _mix(demand: dict[str, float]) -> str:
    return ", ".join(f"{p} {n:.1f}" for p, n in sorted(demand.items())) or "none"
