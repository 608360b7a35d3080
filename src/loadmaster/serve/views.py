"""The API's payloads, built from the demo's state for one principal.

Each function returns the JSON body of one endpoint (docs/dashboard.md
documents every shape). The cluster snapshot is columnar: one array (or one
string, one character per GPU) per attribute, in the flat GPU order of
:class:`~loadmaster.serve.gpus.GpuIndex`, so 10,000 GPUs take about 100 KB.

Privacy is applied here, per principal: a user's view names only the user's
own jobs; every other job is folded into one anonymous owner and counted in
aggregate.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from loadmaster.diagnostics import diagnose, frame_from_store
from loadmaster.diagnostics.reclaim import ReclaimRule, reclaim_report
from loadmaster.errors import LoadmasterError
from loadmaster.model import MILLI_PER_GPU, Job, PendingJob, TaskPlacement
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.plugins.quota import Quota
from loadmaster.serve.auth import AuthError, Principal, can_see_job
from loadmaster.serve.dashboard import Dashboard, placements_of
from loadmaster.serve.live import FREE
from loadmaster.telemetry import field
from loadmaster.telemetry.xid import xid_meaning

FloatArray = npt.NDArray[np.float64]
Json = dict[str, Any]

IDLE_UTIL_PCT = 5.0
"""An allocated GPU whose utilisation is below this is allocated-but-idle (the waste to reclaim)."""
THROTTLE_MASK = 0x04 | 0x08 | 0x20 | 0x40 | 0x80
"""Clock event reasons that mean throttling: SW power cap, HW slowdown, SW/HW thermal, power brake."""

STATES = ("free", "allocated", "allocated-idle", "unhealthy")
"""GPU states; the snapshot's ``state`` string holds each GPU's index into this tuple."""
BADGES = {"xid": 1, "ecc": 2, "throttle": 4}
"""Badge bits; the snapshot's ``badges`` string holds each GPU's bits as one hex digit."""
OTHERS = "others"
"""The owner every other user's job is folded into in a user's view."""


@dataclass(frozen=True)
class Metric:
    """A per-GPU quantity the dashboard can colour by: its name, unit, display range and how to read it."""

    key: str
    label: str
    unit: str
    low: float
    high: float
    read: Callable[[Dashboard, float | None], FloatArray]


def _field(key: str, scale: float = 1.0) -> Callable[[Dashboard, float | None], FloatArray]:
    def read(demo: Dashboard, at_s: float | None) -> FloatArray:
        return demo.telemetry.values(key, at_s) * scale

    return read


def _memory_pct(demo: Dashboard, at_s: float | None) -> FloatArray:
    used = demo.telemetry.values("FB_USED", at_s)
    free = demo.telemetry.values("FB_FREE", at_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(100.0 * used / (used + free), dtype=np.float64)


METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric("util", "GPU utilisation", "%", 0, 100, _field("GPU_UTIL")),
        Metric("sm", "SM activity", "%", 0, 100, _field("SM_ACTIVE", 100.0)),
        Metric("memory", "memory used", "%", 0, 100, _memory_pct),
        Metric("power", "power", "W", 0, 500, _field("POWER_USAGE")),
        Metric("temp", "temperature", "C", 20, 95, _field("GPU_TEMP")),
    )
}
"""The colour-by metrics, by the key the API and the page use."""


def job_namespace(job: Job) -> str:
    """The Kubernetes namespace of a job (``namespace/name`` ids, as ``kube`` names them); a demo job,
    which has none, stands in its group."""
    return job.id.split("/", 1)[0] if "/" in job.id else job.group


def _may_see(principal: Principal, job: Job) -> bool:
    return can_see_job(principal, job.user, job_namespace(job))


class NotFoundError(LoadmasterError):
    """A job, node or metric the request named does not exist (404)."""


def metric(key: str) -> Metric:
    found = METRICS.get(key)
    if found is None:
        raise NotFoundError(f"unknown metric {key!r}; known: {', '.join(METRICS)}")
    return found


def _ints(values: FloatArray) -> list[int]:
    """Rounded values, -1 where missing (two bytes in JSON where null would take four)."""
    rounded: list[int] = np.where(np.isfinite(values), np.rint(values), -1).astype(np.int64).tolist()
    return rounded


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def gpu_states(demo: Dashboard, owner: npt.NDArray[np.int32], at_s: float | None) -> tuple[str, str]:
    """Per flat GPU: the state digit (index into STATES) and the badge hex digit, as two strings."""
    util = demo.telemetry.values("GPU_UTIL", at_s)
    xid = np.nan_to_num(demo.telemetry.values("XID_ERRORS", at_s))
    ecc = np.nan_to_num(demo.telemetry.values("ECC_DBE_VOL_TOTAL", at_s))
    reasons = np.nan_to_num(demo.telemetry.values("CLOCKS_EVENT_REASONS", at_s)).astype(np.int64)
    badges = (xid != 0) * BADGES["xid"] + (ecc > 0) * BADGES["ecc"]
    badges = badges + ((reasons & THROTTLE_MASK) != 0) * BADGES["throttle"]
    state = np.where(owner == FREE, 0, np.where(np.nan_to_num(util, nan=0.0) < IDLE_UTIL_PCT, 2, 1))
    state = np.where((xid != 0) | (ecc > 0), 3, state)
    digits = "0123456789abcdef"
    return "".join("0123"[s] for s in state), "".join(digits[b] for b in badges)


def snapshot(demo: Dashboard, principal: Principal, metric_key: str, at_s: float | None) -> Json:
    """The cluster at ``at_s`` (None: now), every GPU once, columnar; see docs/dashboard.md."""
    chosen = metric(metric_key)
    sim = demo.sim
    frame = sim.frame_at(at_s) if at_s is not None else None
    time_s = frame.time_s if frame is not None else sim.now_s
    read_at = time_s if frame is not None and frame.time_s < sim.now_s else None
    owner = demo.index.flat(frame.owner if frame is not None else sim.owner)
    state, badges = gpu_states(demo, owner, read_at)
    slots, slot_of = _owner_slots(demo, principal, owner)
    nodes = sim.nodes
    return {
        "time_s": time_s,
        "now_s": sim.now_s,
        "oldest_s": demo.oldest_s,
        "version": sim.version,
        "cluster": demo.cluster_name,
        "metric": {
            "key": chosen.key,
            "label": chosen.label,
            "unit": chosen.unit,
            "low": chosen.low,
            "high": chosen.high,
        },
        "states": list(STATES),
        "badges": BADGES,
        "topology": {"pools": list(nodes.pools), "zones": list(nodes.zones), "racks": list(nodes.racks)},
        "nodes": {
            "name": [n.name for n in nodes.nodes],
            "pool": nodes.pool_index.tolist(),
            "zone": nodes.zone_index.tolist(),
            "rack": nodes.rack_index.tolist(),
            "gpus": nodes.gpus.tolist(),
        },
        "gpus": {
            "count": demo.index.size,
            "state": state,
            "badges": badges,
            "owner": slot_of.tolist(),
            "value": _ints(chosen.read(demo, read_at)),
        },
        "owners": slots,
    }


def _owner_slots(
    demo: Dashboard, principal: Principal, owner: npt.NDArray[np.int32]
) -> tuple[Json, npt.NDArray[np.int64]]:
    """The owner table (columnar) and each GPU's slot in it (-1 free); others' jobs share one slot."""
    jobs = demo.sim.jobs
    numbers = np.unique(owner[owner != FREE])
    visible = [int(n) for n in numbers if _may_see(principal, jobs[n].job)]
    hidden = len(numbers) - len(visible)
    table: Json = {"job": [], "user": [], "gpus": [], "mine": []}
    lookup = np.full(len(jobs) + 1, -1, dtype=np.int64)
    for slot, number in enumerate(visible):
        job = jobs[number].job
        table["job"].append(job.id)
        table["user"].append(job.user)
        table["gpus"].append(job.gpus)
        table["mine"].append(job.user == principal.name)
        lookup[number] = slot
    if hidden:
        others = len(visible)
        for number in numbers:
            if lookup[number] < 0:
                lookup[number] = others
        held = int(np.count_nonzero(lookup[owner[owner != FREE]] == others))
        table["job"].append(OTHERS)
        table["user"].append(OTHERS)
        table["gpus"].append(held)
        table["mine"].append(False)
        table["hidden_jobs"] = hidden
    slot_of = np.where(owner == FREE, -1, lookup[np.where(owner == FREE, len(jobs), owner)])
    return table, slot_of


def nodes_view(demo: Dashboard) -> Json:
    """Every node with its place, type and GPUs by state."""
    owner = demo.index.flat(demo.sim.owner)
    state, _ = gpu_states(demo, owner, None)
    nodes = demo.sim.nodes
    rows = []
    for i, node in enumerate(nodes.nodes):
        counts = Counter(state[demo.index.of_node(i)])
        rows.append(
            {
                "name": node.name, "pool": node.pool, "zone": node.zone, "rack": node.rack,
                "resource_type": node.resource_type, "gpus": node.gpus,
                "by_state": {STATES[int(k)]: v for k, v in sorted(counts.items())},
            }
        )  # fmt: skip
    return {"time_s": demo.sim.now_s, "nodes": rows}


def node_view(demo: Dashboard, principal: Principal, name: str) -> Json:
    """One node's GPUs: state, badges, owner (anonymised for a user) and every colour metric."""
    nodes = demo.sim.nodes
    position = next((i for i, n in enumerate(nodes.nodes) if n.name == name), None)
    if position is None:
        raise NotFoundError(f"no node {name!r}")
    part = demo.index.of_node(position)
    owner = demo.index.flat(demo.sim.owner)
    state, badges = gpu_states(demo, owner, None)
    values = {key: m.read(demo, None)[part] for key, m in METRICS.items()}
    xid = np.nan_to_num(demo.telemetry.values("XID_ERRORS"))[part]
    dbe = np.nan_to_num(demo.telemetry.values("ECC_DBE_VOL_TOTAL"))[part]
    gpus = []
    for offset, flat in enumerate(range(part.start, part.stop)):
        number = int(owner[flat])
        job = demo.sim.jobs[number].job if number != FREE else None
        seen = job is not None and _may_see(principal, job)
        gpus.append(
            {
                "gpu": offset,
                "state": STATES[int(state[flat])],
                "badges": [b for b, bit in BADGES.items() if int(badges[flat], 16) & bit],
                "xid": int(xid[offset]),
                "problem": _unhealthy_meaning(int(xid[offset]), float(dbe[offset])) or None,
                "job": (job.id if seen else OTHERS) if job is not None else None,
                "user": (job.user if seen else OTHERS) if job is not None else None,
                **{key: _round(float(v[offset])) for key, v in values.items()},
            }
        )
    node = nodes.nodes[position]
    return {"name": node.name, "pool": node.pool, "zone": node.zone, "rack": node.rack,
            "resource_type": node.resource_type, "gpus": gpus}  # fmt: skip


def _job_state(demo: Dashboard, job_id: str) -> str:
    sim = demo.sim
    number = sim.index[job_id]
    if job_id in sim.cluster.running:
        return "running"
    if job_id in sim.cluster.pending:
        return "pending"
    if not math.isnan(sim.log.end[number]):
        return "finished"
    if sim.log.reason[number]:
        return "rejected"
    return "submitted" if sim.jobs[number].job.submit_s <= sim.now_s else "future"


def _job_row(demo: Dashboard, job: Job) -> Json:
    sim = demo.sim
    number = sim.index[job.id]
    start = float(sim.log.start[number])
    end = float(sim.log.end[number])
    return {
        "id": job.id, "user": job.user, "group": job.group, "queue": job.queue, "pool": job.pool,
        "tasks": job.tasks, "gpus": job.gpus, "submit_s": job.submit_s,
        "start_s": _round(start), "end_s": _round(end), "time_limit_s": job.time_limit_s,
        "state": _job_state(demo, job.id),
    }  # fmt: skip


def _visible_jobs(demo: Dashboard) -> Iterable[Job]:
    sim = demo.sim
    for running in sim.cluster.running.values():
        yield running.job
    for pending in sim.cluster.pending.values():
        yield pending.job


def jobs_view(demo: Dashboard, principal: Principal, scope: str) -> Json:
    """Running and pending jobs: ``mine`` or ``all``; a user's ``all`` shows others only in aggregate."""
    if scope not in {"mine", "all"}:
        raise NotFoundError(f"unknown scope {scope!r}; known: mine, all")
    efficiency = _efficiency(demo)
    rows, others = [], _Aggregate()
    for job in _visible_jobs(demo):
        mine = job.user == principal.name
        if mine or (scope == "all" and _may_see(principal, job)):
            rows.append({**_job_row(demo, job), "efficiency_pct": _round(efficiency.get(job.id))})
        elif scope == "all":
            others.add(job, demo)
    body: Json = {"time_s": demo.sim.now_s, "scope": scope, "jobs": rows}
    if scope == "all" and not principal.is_operator:
        body["others"] = others.json()
    return body


class _Aggregate:
    """Other users' jobs counted, never named."""

    def __init__(self) -> None:
        self.users: set[str] = set()
        self.running = self.pending = 0
        self.gpus = 0.0

    def add(self, job: Job, demo: Dashboard) -> None:
        self.users.add(job.user)
        if job.id in demo.sim.cluster.running:
            self.running += 1
            self.gpus += job.gpus
        else:
            self.pending += 1

    def json(self) -> Json:
        return {"users": len(self.users), "running_jobs": self.running, "pending_jobs": self.pending,
                "gpus_in_use": self.gpus}  # fmt: skip


def _efficiency(demo: Dashboard) -> dict[str, float]:
    """Mean GPU utilisation (%) of each running job's GPUs at the newest sample."""
    owner = demo.index.flat(demo.sim.owner)
    util = demo.telemetry.values("GPU_UTIL")
    held = (owner != FREE) & np.isfinite(util)
    if not held.any():
        return {}
    sums = np.bincount(owner[held], weights=util[held], minlength=len(demo.sim.jobs))
    counts = np.bincount(owner[held], minlength=len(demo.sim.jobs))
    return {demo.sim.jobs[int(n)].job.id: float(sums[n] / counts[n]) for n in np.flatnonzero(counts)}


def _find_job(demo: Dashboard, principal: Principal, job_id: str) -> Job:
    number = demo.sim.index.get(job_id)
    if number is None or demo.sim.jobs[number].job.submit_s > demo.sim.now_s:
        raise NotFoundError(f"no job {job_id!r}")
    job = demo.sim.jobs[number].job
    if not _may_see(principal, job):
        raise AuthError(403, f"job {job_id} belongs to another user; users see only their own jobs")
    return job


def _placements(demo: Dashboard, job_id: str) -> tuple[TaskPlacement, ...]:
    return placements_of(demo.sim, job_id)


def job_view(demo: Dashboard, principal: Principal, job_id: str) -> Json:
    """One job in full: where it runs, why it waits, when it should start, how well it uses its GPUs."""
    job = _find_job(demo, principal, job_id)
    sim = demo.sim
    names = [n.name for n in sim.nodes.nodes]
    body = _job_row(demo, job)
    body["placements"] = [
        {"node": names[p.node], "gpus": list(p.gpu_indices), "gpu_milli": p.gpu_milli}
        for p in _placements(demo, job_id)
    ]
    body["efficiency_pct"] = _round(_efficiency(demo).get(job_id))
    pending = sim.cluster.pending.get(job_id)
    body["pending"] = _pending_row(demo, pending, _positions(demo)) if pending is not None else None
    reason = sim.log.wait_reason[sim.index[job_id]] or sim.log.reason[sim.index[job_id]]
    body["last_wait_reason"] = reason or None
    return body


def _positions(demo: Dashboard) -> dict[str, int]:
    """Each pending job's place (1 = next) among the pending jobs of its queue, in submission order."""
    seen: Counter[str] = Counter()
    out = {}
    for job_id, pending in demo.sim.cluster.pending.items():
        seen[pending.job.queue] += 1
        out[job_id] = seen[pending.job.queue]
    return out


def _pending_row(demo: Dashboard, pending: PendingJob, positions: dict[str, int]) -> Json:
    sim = demo.sim
    status = sim.status(pending)
    job = pending.job
    return {
        "id": job.id, "user": job.user, "queue": job.queue, "pool": job.pool, "gpus": job.gpus,
        "submit_s": job.submit_s, "wait_s": sim.now_s - job.submit_s, "position": positions[job.id],
        "tasks_bound": len(pending.bound),
        "code": status.code.value if status is not None else None,
        "plugin": status.plugin if status is not None else None,
        "reason": status.reason if status is not None else "not yet examined by the scheduler",
        "estimated_start_s": _round(sim.estimated_start(job.id)),
    }  # fmt: skip


def queue_view(demo: Dashboard, principal: Principal) -> Json:
    """Pending jobs per queue with why each waits and its estimated start; a user's others counted only."""
    positions = _positions(demo)
    queues: dict[str, Json] = {}
    for pending in demo.sim.cluster.pending.values():
        job = pending.job
        entry = queues.setdefault(job.queue, {"queue": job.queue, "pending": 0, "gpus_wanted": 0.0,
                                              "oldest_wait_s": 0.0, "jobs": [], "hidden": 0})  # fmt: skip
        entry["pending"] += 1
        entry["gpus_wanted"] += job.gpus
        entry["oldest_wait_s"] = max(entry["oldest_wait_s"], demo.sim.now_s - job.submit_s)
        if _may_see(principal, job):
            entry["jobs"].append(_pending_row(demo, pending, positions))
        else:
            entry["hidden"] += 1
    return {"time_s": demo.sim.now_s, "queues": list(queues.values())}


def me_view(demo: Dashboard, principal: Principal) -> Json:
    """The user view: my running and pending jobs, my queue positions, my GPU efficiency."""
    mine = jobs_view(demo, principal, "mine")["jobs"]
    positions = _positions(demo)
    pending = [
        _pending_row(demo, p, positions)
        for p in demo.sim.cluster.pending.values()
        if p.job.user == principal.name
    ]
    running = [j for j in mine if j["state"] == "running"]
    gpus = sum(j["gpus"] for j in running)
    weighted = [(j["efficiency_pct"], j["gpus"]) for j in running if j["efficiency_pct"] is not None]
    total = sum(g for _, g in weighted)
    efficiency = sum(e * g for e, g in weighted) / total if total else None
    return {
        "name": principal.name, "role": principal.role.value, "time_s": demo.sim.now_s,
        "running": running, "pending": pending, "gpus_in_use": gpus,
        "efficiency_pct": _round(efficiency),
    }  # fmt: skip


def operator_summary(demo: Dashboard) -> Json:
    """Health, idle allocated GPUs, fragmentation and queues per pool (the caller checks the role)."""
    sim = demo.sim
    owner = demo.index.flat(sim.owner)
    state, badges = gpu_states(demo, owner, None)
    codes = np.frombuffer(state.encode(), dtype=np.uint8) - ord("0")
    names = [n.name for n in sim.nodes.nodes]
    xid = np.nan_to_num(demo.telemetry.values("XID_ERRORS"))
    dbe = np.nan_to_num(demo.telemetry.values("ECC_DBE_VOL_TOTAL"))
    unhealthy = [
        {"node": names[int(demo.index.node[i])], "gpu": int(demo.index.gpu[i]), "badges": badges[i],
         "xid": int(xid[i]), "meaning": _unhealthy_meaning(int(xid[i]), float(dbe[i]))}
        for i in np.flatnonzero(codes == 3)
    ]  # fmt: skip
    idle_by_job: Counter[str] = Counter(sim.jobs[int(owner[i])].job.id for i in np.flatnonzero(codes == 2))
    pools = []
    pool_of_gpu = sim.nodes.pool_index[demo.index.node]
    for p, pool in enumerate(sim.nodes.pools):
        in_pool = pool_of_gpu == p
        pools.append(_pool_summary(demo, pool, codes[in_pool]))
    users: defaultdict[str, float] = defaultdict(float)
    for running in sim.cluster.running.values():
        users[running.job.user] += running.job.gpus
    return {
        "time_s": sim.now_s,
        "gpus": demo.index.size,
        "by_state": {STATES[k]: int(np.count_nonzero(codes == k)) for k in range(len(STATES))},
        "unhealthy": unhealthy,
        "idle_allocated": {
            "gpus": int(np.count_nonzero(codes == 2)),
            "top_jobs": [{"job": j, "idle_gpus": n} for j, n in idle_by_job.most_common(10)],
        },
        "pools": pools,
        "users": [{"user": u, "gpus": g} for u, g in sorted(users.items(), key=lambda kv: -kv[1])],
        "speed": demo.speed,
        "paused": demo.paused,
    }


def _unhealthy_meaning(xid: int, dbe: float) -> str:
    """Why a GPU is unhealthy, in words: its XID code's meaning, or its double-bit ECC errors."""
    if xid:
        return f"XID {xid}: {xid_meaning(xid)}"
    return f"{dbe:.0f} double-bit ECC error(s): drain the node and reset the GPU" if dbe > 0 else ""


def _pool_summary(demo: Dashboard, pool: str, codes: npt.NDArray[np.uint8]) -> Json:
    sim = demo.sim
    rows = np.flatnonzero(np.asarray(sim.nodes.pool_index) == sim.nodes.pools.index(pool))
    whole = np.count_nonzero(sim.cluster.gpu_free[rows] == MILLI_PER_GPU, axis=1)
    waiting = [p for p in sim.cluster.pending.values() if p.job.pool == pool]
    smallest = min((p.job.request.whole_gpus for p in waiting), default=0)
    fragmented = int(whole[whole < smallest].sum()) if smallest > 1 else 0
    return {
        "pool": pool,
        "gpus": int(codes.size),
        "allocated": int(np.count_nonzero((codes == 1) | (codes == 2))),
        "free": int(np.count_nonzero(codes == 0)),
        "fragmented_free": fragmented,
        "largest_free_block": int(whole.max(initial=0)),
        "queue_length": len(waiting),
        "gpus_wanted": float(sum(p.job.gpus for p in waiting)),
        "oldest_wait_s": float(max((sim.now_s - p.job.submit_s for p in waiting), default=0.0)),
    }


def job_telemetry(
    demo: Dashboard, principal: Principal, job_id: str, *, metric_key: str, window_s: float, step_s: float
) -> Json:
    """A job's rank x time matrix of one metric over its run (at most the last ``window_s``)."""
    job = _find_job(demo, principal, job_id)
    chosen = metric(metric_key)
    sim = demo.sim
    start, end = _run_interval(demo, job.id)
    placements = _placements(demo, job.id)
    names = [n.name for n in sim.nodes.nodes]
    ranks = [(p.node, g) for p in placements for g in p.gpu_indices]
    labels = [f"{names[n]}/{g}" for n, g in ranks]
    if math.isnan(start) or not ranks:
        return {"job": job.id, "metric": chosen.key, "unit": chosen.unit, "ranks": labels,
                "times_s": [], "values": [[] for _ in ranks]}  # fmt: skip
    lo = max(start, end - window_s, demo.oldest_s)
    step = max(step_s, (end - lo) / 240 if end > lo else step_s)
    matrix, times = _rank_matrix(demo, chosen, ranks, lo=lo, hi=max(end, lo + step), step=step)
    return {
        "job": job.id, "metric": chosen.key, "unit": chosen.unit, "low": chosen.low, "high": chosen.high,
        "ranks": labels, "times_s": [round(float(t), 1) for t in times],
        "values": [[_round(float(v)) for v in row] for row in matrix],
    }  # fmt: skip


def _run_interval(demo: Dashboard, job_id: str) -> tuple[float, float]:
    """When the job started (NaN if it has not) and when it ended (now while it runs)."""
    sim = demo.sim
    start = float(sim.log.start[sim.index[job_id]])
    record = sim.records.get(job_id)
    if math.isnan(start) and record is not None:
        start = record.start_s
    end = record.end_s if record is not None and record.end_s is not None else sim.now_s
    return start, end


def _rank_matrix(
    demo: Dashboard, chosen: Metric, ranks: list[tuple[int, int]], *, lo: float, hi: float, step: float
) -> tuple[FloatArray, FloatArray]:
    flat = [int(demo.index.first[n]) + g for n, g in ranks]
    series = [int(demo.telemetry.series_of_gpu[i]) for i in flat]
    keys = {"util": ("GPU_UTIL", 1.0), "sm": ("SM_ACTIVE", 100.0), "power": ("POWER_USAGE", 1.0),
            "temp": ("GPU_TEMP", 1.0), "memory": ("FB_USED", 1.0)}  # fmt: skip
    key, scale = keys[chosen.key]
    got = demo.store.range(field(key), series, lo, hi, step)
    values = got.mean * scale
    if chosen.key == "memory":
        free = demo.store.range(field("FB_FREE"), series, lo, hi, step).mean
        with np.errstate(invalid="ignore", divide="ignore"):
            values = 100.0 * got.mean / (got.mean + free)
    return values, got.times_s


FINDINGS_WINDOW_S = 6 * 3600.0
"""How much of a job's run (the newest part) its findings are computed over."""


def job_findings(demo: Dashboard, principal: Principal, job_id: str) -> Json:
    """The diagnostics findings of a job's telemetry (kind, targets, interval, evidence, confidence).

    Computed from the demo's store on the telemetry grid over the newest
    :data:`FINDINGS_WINDOW_S` of the run; a job without telemetry under its
    label (pending, or its GPUs already relabelled after it ended), or too
    little of it for a verdict, gets an empty list and a ``note`` that says
    why; a window reaching back before the job's telemetry began gets a
    ``note`` saying where it begins (that time is not reported as missing).
    """
    job = _find_job(demo, principal, job_id)
    start, end = _run_interval(demo, job.id)
    step = demo.options.telemetry_step_s
    out: Json = {"job": job.id, "step_s": step, "start_s": None, "end_s": None, "findings": []}
    if math.isnan(start):
        return {**out, "note": "the job has not started: no telemetry yet"}
    lo = max(start, end - FINDINGS_WINDOW_S, demo.oldest_s)
    lo = step * math.floor(lo / step)
    series = demo.gpu_series_of(job.id)
    if end - lo < 3 * step or not series:
        return {**out, "note": "too little telemetry of this job's GPUs to diagnose"}
    frame = frame_from_store(demo.store, job.id, lo, end, step, series=series)
    diagnosis = diagnose(frame, with_overview=False)
    body = {**out, "start_s": lo, "end_s": end, "findings": [f.to_dict() for f in diagnosis.findings]}
    return {**body, "note": diagnosis.note} if diagnosis.note else body


def reclaim_view(demo: Dashboard) -> Json:
    """The reclaim report (idle and under-used allocated GPUs per job and user, with the action)
    as of now, ranked by wasted GPU-hours (each idle stretch bounded by its job's start); the
    rule's sample is at least one telemetry step, so coverage is judged fairly."""
    rule = ReclaimRule(sample_s=max(ReclaimRule().sample_s, demo.options.telemetry_step_s))
    starts = {job_id: record.start_s for job_id, record in demo.sim.records.items()}
    report = reclaim_report(demo.store, demo.now_s, rule, job_starts=starts).to_dict()
    return {**report, "idle_now": idle_now(demo, report)}


def idle_now(demo: Dashboard, report: Json) -> Json:
    """How a reclaim report's idle GPUs relate to the GPUs idle in the newest sample (the operator
    page's card), so the page shows one count of idle GPUs and explains the rest.

    A GPU is idle now when it is allocated and under :data:`IDLE_UTIL_PCT` in the newest sample; the
    reclaim table lists only those idle in every sample of its window (``rule.idle_window_s``), so
    ``listed`` of the ``gpus`` idle now are in the table and ``not_listed`` became idle more recently
    (or have too little telemetry for the rule's coverage). ``listed_not_idle_now`` should be 0; a
    GPU there woke up between the reclaim window's last sample and now.
    """
    owner = demo.index.flat(demo.sim.owner)
    state, _ = gpu_states(demo, owner, None)
    names = [n.name for n in demo.sim.nodes.nodes]
    now = {
        f"{names[int(demo.index.node[i])]}/{int(demo.index.gpu[i])}"
        for i in np.flatnonzero(np.frombuffer(state.encode(), dtype=np.uint8) == ord("2"))
    }
    listed = {gpu for job in report["jobs"] for gpu in job["idle"]}
    return {
        "gpus": len(now),
        "listed": len(now & listed),
        "not_listed": len(now - listed),
        "listed_not_idle_now": len(listed - now),
        "idle_util_pct": IDLE_UTIL_PCT,
    }


HISTORY_POINTS = 120
"""Points per series of the operator's history charts (the step grows with the range)."""


def pool_history(demo: Dashboard, window_s: float | None = None) -> Json:
    """Per pool over the kept history (or its newest ``window_s``): GPUs allocated, mean GPU
    utilisation and jobs waiting, at most :data:`HISTORY_POINTS` times, for the operator's charts.

    Allocation is read from the ownership frames the time scrubber uses (the frame at or before each
    time); utilisation is the mean over the pool's GPUs that reported in each step (free GPUs report
    0 %, so it is the pool's utilisation, not its jobs' efficiency); the queue counts jobs submitted
    at or before the time that had not started by it (a job still pending now counts until now);
    ``queue_any_pool`` counts the jobs that name no pool (a live cluster's pods may run anywhere).
    """
    sim = demo.sim
    now, oldest = demo.now_s, demo.oldest_s
    span = now - oldest if window_s is None else min(max(window_s, 0.0), now - oldest)
    step = max(demo.options.telemetry_step_s, span / HISTORY_POINTS) if span > 0 else 1.0
    times = np.arange(now - span, now + step / 2, step)[-HISTORY_POINTS - 1 :]
    pools = list(sim.nodes.pools)
    pool_of_gpu = np.asarray(sim.nodes.pool_index)[demo.index.node]
    allocated = np.zeros((len(pools), times.size), dtype=np.int64)
    for k, t in enumerate(times):
        held = demo.index.flat(sim.frame_at(float(t)).owner) != FREE
        allocated[:, k] = np.bincount(pool_of_gpu[held], minlength=len(pools))
    return {
        "time_s": now,
        "oldest_s": oldest,
        "window_s": span,
        "step_s": step,
        "times_s": [round(float(t), 1) for t in times],
        "pools": [
            {
                "pool": pool,
                "gpus": int(np.count_nonzero(pool_of_gpu == p)),
                "allocated": allocated[p].tolist(),
                "util_pct": [_round(float(v)) for v in _pool_util(demo, pool_of_gpu == p, times, step)],
                "queue": _queue_over(demo, pool, times).tolist(),
            }
            for p, pool in enumerate(pools)
        ],
        "queue_any_pool": _queue_over(demo, None, times).tolist(),
    }


def _pool_util(demo: Dashboard, in_pool: npt.NDArray[np.bool_], times: FloatArray, step: float) -> FloatArray:
    series = sorted({int(s) for s in demo.telemetry.series_of_gpu[in_pool] if s >= 0})
    if not series or times.size == 0:
        return np.full(times.size, np.nan)
    # each point is the mean of the step before it: buckets [t - step, t), so the newest point has data
    got = demo.store.range(field("GPU_UTIL"), series, float(times[0]) - step, float(times[-1]), step)
    counts = np.sum(np.isfinite(got.mean), axis=0)
    sums = np.nansum(got.mean, axis=0)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    out = np.full(times.size, np.nan)
    if got.times_s.size:
        at = np.rint((times - step - got.times_s[0]) / step).astype(np.int64)
        ok = (at >= 0) & (at < means.size)
        out[ok] = means[at[ok]]
    return out


def _queue_over(demo: Dashboard, pool: str | None, times: FloatArray) -> npt.NDArray[np.int64]:
    sim = demo.sim
    numbers = [
        n for n, trace in enumerate(sim.jobs) if trace.job.pool == pool and trace.job.submit_s <= sim.now_s
    ]
    if not numbers:
        return np.zeros(times.size, dtype=np.int64)
    submit = np.array([sim.jobs[n].job.submit_s for n in numbers])
    start = np.asarray(sim.log.start, dtype=np.float64)[numbers]
    pending_now = np.array([sim.jobs[n].job.id in sim.cluster.pending for n in numbers])
    # a job pending now waits until now (one put back in the queue by preemption counts from its
    # submission: an over-count of its earlier run); one that never started and is not pending was
    # rejected and never queued
    start = np.where(pending_now, np.inf, np.where(np.isnan(start), -np.inf, start))
    waiting = (submit[:, None] <= times[None, :]) & (start[:, None] > times[None, :])
    counts: npt.NDArray[np.int64] = np.count_nonzero(waiting, axis=0).astype(np.int64)
    return counts


NO_SCHEDULER = (
    "this server does not run the scheduler (live mode reads the cluster; quotas live in the profile "
    "of `loadmaster kube run`): usage and demand are shown"
)
NO_QUOTA = "the scheduler's profile has no quota plugin: groups have no nominal quota and nothing to borrow"


def _quotas(demo: Dashboard) -> tuple[Quota | None, str | None]:
    """The scheduler's quota plugin when its profile has one (the ``fair`` profile; ``sds`` has none),
    else a note saying why there is none: the demo runs the scheduler in process, live mode does not."""
    scheduler = getattr(demo.sim, "scheduler", None)
    if not isinstance(scheduler, Scheduler):
        return None, NO_SCHEDULER
    found = scheduler.profile.of(Quota)
    return (found[0], None) if found else (None, NO_QUOTA)


def groups_view(demo: Dashboard) -> Json:
    """Each group's usage, waiting demand and quota, as Kueue's cohorts and Slurm's ``sshare`` show them.

    ``used`` counts the GPUs of the group's running jobs; ``share_pct`` is its part of all GPUs in use
    (Slurm's effective usage). Where the scheduler's profile has the ``quota`` plugin, each group also
    has its organisation (a Kueue cohort), ``nominal`` (guaranteed GPUs), ``borrowing_limit`` and
    ``lending_limit`` (None: unlimited), ``borrowed`` (GPUs used above nominal, lent by the
    organisation's other groups or its unassigned GPUs) and ``unused_nominal`` (nominal GPUs the
    group leaves for others to borrow); ``nominal_share_pct`` is the nominal's part of its
    organisation (Slurm's normalised shares).
    """
    sim = demo.sim
    used: defaultdict[str, float] = defaultdict(float)
    jobs: Counter[str] = Counter()
    users: defaultdict[str, set[str]] = defaultdict(set)
    pending: Counter[str] = Counter()
    wanted: defaultdict[str, float] = defaultdict(float)
    for running in sim.cluster.running.values():
        used[running.job.group] += running.job.gpus
        jobs[running.job.group] += 1
        users[running.job.group].add(running.job.user)
    for waiting in sim.cluster.pending.values():
        pending[waiting.job.group] += 1
        wanted[waiting.job.group] += waiting.job.gpus
        users[waiting.job.group].add(waiting.job.user)
    quota, note = _quotas(demo)
    orgs = quota.settings.orgs if quota is not None else {}
    org_of = quota.org_of if quota is not None else {}
    total_used = sum(used.values())
    rows = []
    for group in sorted(set(used) | set(pending) | set(org_of)):
        row: Json = {
            "group": group, "org": org_of.get(group), "used": round(used[group], 3),
            "running_jobs": jobs[group], "pending_jobs": pending[group],
            "gpus_wanted": round(wanted[group], 3), "users": len(users[group]),
            "share_pct": _round(100.0 * used[group] / total_used if total_used else None),
            "nominal": None, "borrowing_limit": None, "lending_limit": None, "borrowed": None,
            "unused_nominal": None, "nominal_share_pct": None,
        }  # fmt: skip
        org = org_of.get(group)
        if org is not None:
            q = orgs[org].groups[group]
            row |= {
                "nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit,
                "borrowed": round(max(0.0, used[group] - q.nominal), 3),
                "unused_nominal": round(max(0.0, q.nominal - used[group]), 3),
                "nominal_share_pct": _round(100.0 * q.nominal / orgs[org].total if orgs[org].total else None),
            }  # fmt: skip
        rows.append(row)
    cohorts = [
        {"org": org, "nominal": q.total, "unassigned": q.unassigned, "groups": sorted(q.groups),
         "used": round(sum(used[g] for g in q.groups), 3)}
        for org, q in orgs.items()
    ]  # fmt: skip
    return {
        "time_s": sim.now_s,
        "quota": quota is not None,
        "note": note,
        "groups": rows,
        "orgs": cohorts,
    }
