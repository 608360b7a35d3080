"""Policy sweeps: a grid of cells (cluster, workload, load, profile, variant, seed) run in parallel,
stored by content hash so that nothing is lost, and summarised with intervals and paired tests."""

from loadmaster.sweep.engine import Outcome, Progress, run_sweep
from loadmaster.sweep.report import write_report
from loadmaster.sweep.spec import Cell, Sweep, load_sweep
from loadmaster.sweep.store import Store

__all__ = ["Cell", "Outcome", "Progress", "Store", "Sweep", "load_sweep", "run_sweep", "write_report"]
