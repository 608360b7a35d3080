"""The discrete-event simulator that drives the scheduling core in simulated time."""

from loadmaster.sim.cluster import SimCluster
from loadmaster.sim.result import RunResult
from loadmaster.sim.simulator import SimOptions, Simulator, simulate

__all__ = ["RunResult", "SimCluster", "SimOptions", "Simulator", "simulate"]
