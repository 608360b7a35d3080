"""MIG in the simulator: layouts at start, reconfiguration time, node reboots and dynamic re-planning.

A GPU's layout changes only when every instance on it is free, and the change
takes ``reconfigure_s`` during which the GPU serves nothing. A rebooted node
loses its running jobs (they are requeued) and everything on it for
``down_s``; MIG layouts do not survive a reboot, so the node's MIG GPUs get
their configured layout re-applied when it comes back, which takes
``reconfigure_s`` more. With ``replan_period_s`` set, the simulator re-plans
each MIG pool periodically (:func:`loadmaster.scheduling.mig_plan.plan_layouts`)
for the demand of the moment (MIG tasks running plus waiting) and
reconfigures the empty GPUs whose layout the plan changes, when the plan
serves more than the current layouts. :class:`MigReport` says what that cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from loadmaster.errors import ModelError, SimulationError
from loadmaster.model import MigInstance, MigPoolConfig, NodeTable, RunningJob
from loadmaster.model.mig import MigModel, layout_text, mig_model_for, parse_layout
from loadmaster.model.snapshot import node_gpu_summary
from loadmaster.scheduling.mig_plan import plan_layouts
from loadmaster.scheduling.mig_pool import MigPool
from loadmaster.sim.cluster import SimCluster


@dataclass(frozen=True, slots=True)
class Reboot:
    """Node ``node`` (by name) reboots at ``at_s`` and is back ``down_s`` later."""

    node: str
    at_s: float
    down_s: float = 300.0
    """Five minutes: a server's POST plus OS boot plus kubelet and GPU driver start."""


@dataclass(frozen=True, slots=True)
class MigSimOptions:
    """The cluster's MIG pools and how the simulator treats layout changes."""

    pools: tuple[MigPoolConfig, ...]
    reconfigure_s: float = 60.0
    """Time a GPU is unusable while its layout changes (destroying and creating GPU and compute
    instances, and the device plugin re-advertising them takes tens of seconds to minutes)."""
    reboots: tuple[Reboot, ...] = ()
    replan_period_s: float | None = None
    """Re-plan the layouts every this many seconds (dynamic MIG); None: layouts stay as configured."""


@dataclass(slots=True)
class MigReport:
    """What layout changes cost in a run."""

    reconfigurations: int = 0
    """GPU layout changes made by re-planning."""
    reconfigure_gpu_s: float = 0.0
    """GPU-seconds unusable while re-planned layouts were applied."""
    reboots: int = 0
    reboot_gpu_s: float = 0.0
    """GPU-seconds lost to reboots: down time plus re-applying the layouts."""
    jobs_preempted: int = 0
    """Jobs stopped and requeued by reboots."""
    jobs_delayed: int = 0
    """Distinct MIG jobs waiting when a reconfiguration began that creates instances of their profile."""
    layouts: dict[str, int] = field(default_factory=dict)
    """At the end of the run: how many GPUs have each layout."""


def build_mig_pool(nodes: NodeTable, configs: Sequence[MigPoolConfig]) -> MigPool:
    """Every MIG-mode GPU of the configured pools, with its configured layout; ModelError if invalid."""
    gpus: dict[tuple[int, int], tuple[MigModel, Sequence[MigInstance]]] = {}
    for key, (model, layout) in configured_layouts(nodes, configs).items():
        gpus[key] = (model, layout)
    return MigPool.build(len(nodes), gpus)


def configured_layouts(
    nodes: NodeTable, configs: Sequence[MigPoolConfig]
) -> dict[tuple[int, int], tuple[MigModel, tuple[MigInstance, ...]]]:
    """(node, GPU) -> (model, layout) as the pool configuration sets them."""
    found: dict[tuple[int, int], tuple[MigModel, tuple[MigInstance, ...]]] = {}
    for config in configs:
        if config.pool not in nodes.pools:
            raise ModelError(f"MIG pool {config.pool!r}: no such pool; pools: {', '.join(nodes.pools)}")
        for index, node in enumerate(nodes.nodes):
            if node.pool != config.pool:
                continue
            gpu_model = nodes.resource_types[node.resource_type].gpu_model
            model = mig_model_for(gpu_model)
            if model is None:
                raise ModelError(f"MIG pool {config.pool!r}: node {node.name}'s GPU {gpu_model} has no MIG")
            layout = parse_layout(model, config.layout)
            count = node.gpus if config.gpus_per_node is None else min(config.gpus_per_node, node.gpus)
            for gpu in range(count):
                found[(index, gpu)] = (model, layout)
    return found


class MigDriver:
    """Carries out MIG events for a :class:`~loadmaster.sim.simulator.Simulator`.

    ``schedule(time_s, token)`` queues an event that comes back as
    :meth:`handle` ``(token, now)``; ``preempt(job_id, reason, now)`` stops a
    running job; ``active()`` says whether anything can still happen (else
    re-planning stops, so the run ends).
    """

    def __init__(
        self,
        nodes: NodeTable,
        options: MigSimOptions,
        *,
        cluster: SimCluster,
        schedule: Callable[[float, int], None],
        preempt: Callable[[str, str, float], None],
        active: Callable[[float], bool],
    ) -> None:
        if cluster.mig is None:
            raise SimulationError("MigDriver needs a cluster with MIG GPUs")
        self.pool = cluster.mig
        self.nodes = nodes
        self.options = options
        self.cluster = cluster
        self.configured = configured_layouts(nodes, options.pools)
        self.report = MigReport()
        self._schedule, self._preempt, self._active = schedule, preempt, active
        self._events: list[tuple[str, int, int]] = []
        self._held: dict[int, tuple[np.ndarray, int, int]] = {}
        self._delayed: set[str] = set()
        self._groups = self._pool_groups()

    def _pool_groups(self) -> dict[tuple[str, str], list[tuple[int, int]]]:
        groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for (node, gpu), (model, _) in sorted(self.configured.items()):
            groups.setdefault((self.nodes.nodes[node].pool, model.name), []).append((node, gpu))
        return groups

    def _push(self, time_s: float, kind: str, node: int, gpu: int = -1) -> None:
        self._events.append((kind, node, gpu))
        self._schedule(time_s, len(self._events) - 1)

    def start(self, first_s: float) -> None:
        """Queue the reboots and the first re-planning."""
        index = {n.name: i for i, n in enumerate(self.nodes.nodes)}
        for reboot in self.options.reboots:
            if reboot.node not in index:
                raise SimulationError(f"reboot of unknown node {reboot.node!r}")
            self._push(reboot.at_s, "reboot", index[reboot.node], -1)
        if self.options.replan_period_s is not None:
            self._push(first_s + self.options.replan_period_s, "replan", -1)

    def handle(self, token: int, now: float) -> None:
        """Carry out one MIG event."""
        kind, node, gpu = self._events[token]
        if kind == "ready":
            self.pool.set_ready(node, gpu, True)
        elif kind == "reboot":
            self._reboot(node, now)
        elif kind == "up":
            self._up(node, now)
        elif kind == "replan":
            changed = self._replan(now)
            # Stop once nothing runs, nothing is left to arrive and a re-plan changes nothing:
            # jobs still waiting then wait for good, and the run must end.
            if self.options.replan_period_s is not None and (changed or self._active(now)):
                self._push(now + self.options.replan_period_s, "replan", -1)

    def _reboot(self, node: int, now: float) -> None:
        reboot = next(
            r for r in self.options.reboots if r.node == self.nodes.nodes[node].name and r.at_s == now
        )
        victims = [r for r in self.cluster.running.values() if any(p.node == node for p in r.placements)]
        for running in victims:
            self._preempt(running.job.id, f"node {self.nodes.nodes[node].name} rebooted", now)
        self.report.reboots += 1
        self.report.jobs_preempted += len(victims)
        self.report.reboot_gpu_s += int(self.nodes.gpus[node]) * (reboot.down_s + self.options.reconfigure_s)
        cluster = self.cluster
        self._held[node] = (
            cluster.gpu_free[node].copy(),
            int(cluster.cpu_free[node]),
            int(cluster.memory_free[node]),
        )
        cluster.gpu_free[node] = 0
        cluster.cpu_free[node] = 0
        cluster.memory_free[node] = 0
        self._refresh(node)
        for gpu in self.pool.node_gpus(node):
            self.pool.set_ready(node, gpu, False)
        self._push(now + reboot.down_s, "up", node)

    def _up(self, node: int, now: float) -> None:
        gpu_free, cpu, memory = self._held.pop(node)
        self.cluster.gpu_free[node] += gpu_free
        self.cluster.cpu_free[node] += cpu
        self.cluster.memory_free[node] += memory
        self._refresh(node)
        for gpu in self.pool.node_gpus(node):
            if self.pool.gpus[(node, gpu)].empty:  # MIG layouts are lost on reboot: re-apply
                self.pool.set_layout(node, gpu, self.configured[(node, gpu)][1], ready=False)
            self._push(now + self.options.reconfigure_s, "ready", node, gpu)

    def _refresh(self, node: int) -> None:
        summary = node_gpu_summary(self.cluster.gpu_free[node])
        self.cluster.whole_free[node], self.cluster.largest_share[node], self.cluster.free_milli[node] = (
            summary
        )

    def demand(self) -> dict[str, float]:
        """MIG instances wanted now, per profile: running MIG tasks plus tasks still waiting."""
        wanted: dict[str, float] = {}
        for running in self.cluster.running.values():
            _count_running(running, wanted)
        for pending in self.cluster.pending.values():
            profile = pending.job.request.mig_profile
            if profile is not None:
                wanted[profile] = wanted.get(profile, 0.0) + pending.job.tasks - len(pending.bound)
        return wanted

    def _replan(self, now: float) -> bool:
        """Re-plan every MIG pool group; True if any GPU is being reconfigured."""
        changed = False
        demand = self.demand()
        for keys in self._groups.values():
            model = self.configured[keys[0]][0]
            current = [self.pool.gpus[k].layout for k in keys]
            plan = plan_layouts(model, len(keys), demand, current)
            if plan.served_slices <= plan.current_served_slices:
                continue
            for key, layout in _assign(keys, current, plan.layouts, self.pool).items():
                self._reconfigure(key, layout, now)
                changed = True
        return changed

    def _reconfigure(self, key: tuple[int, int], layout: tuple[MigInstance, ...], now: float) -> None:
        node, gpu = key
        self.pool.set_layout(node, gpu, layout, ready=False)
        self._push(now + self.options.reconfigure_s, "ready", node, gpu)
        self.report.reconfigurations += 1
        self.report.reconfigure_gpu_s += self.options.reconfigure_s
        created = {i.profile for i in layout}
        for pending in self.cluster.pending.values():
            if pending.job.request.mig_profile in created:
                self._delayed.add(pending.job.id)
        self.report.jobs_delayed = len(self._delayed)

    def finish(self) -> MigReport:
        """The report, with the final layouts counted."""
        counts: dict[str, int] = {}
        for _, _, gpu in self.pool.instances():
            text = layout_text(gpu.layout)
            counts[text] = counts.get(text, 0) + 1
        self.report.layouts = counts
        return self.report


def _count_running(running: RunningJob, wanted: dict[str, float]) -> None:
    for placement in running.placements:
        if placement.mig is not None:
            wanted[placement.mig.profile] = wanted.get(placement.mig.profile, 0.0) + 1


def _assign(
    keys: Sequence[tuple[int, int]],
    current: Sequence[tuple[MigInstance, ...]],
    planned: Sequence[tuple[MigInstance, ...]],
    pool: MigPool,
) -> Mapping[tuple[int, int], tuple[MigInstance, ...]]:
    """Which GPUs change to which planned layout: GPUs already matching a planned layout keep it;
    the rest of the plan goes to empty, ready GPUs; busy GPUs keep their layout until a later plan."""
    left = [layout_text(p) for p in planned]
    by_text = {layout_text(p): p for p in planned}
    changes: dict[tuple[int, int], tuple[MigInstance, ...]] = {}
    free: list[tuple[int, int]] = []
    for key, layout in zip(keys, current, strict=True):
        text = layout_text(layout)
        if text in left:
            left.remove(text)
        elif pool.gpus[key].empty and pool.gpus[key].ready:
            free.append(key)
    for key, text in zip(free, left, strict=False):
        changes[key] = by_text[text]
    return changes
